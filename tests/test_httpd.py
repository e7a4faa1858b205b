"""The limits of the servers' shared HTTP layer (rollout/httpd.py); the load tests of both servers are in
test_shop.py and test_policies.py."""


def test_a_burst_of_connections_waits_in_the_listen_queue_while_none_is_accepted():
    """While the server accepts nothing (a thread waiting for the CPU), a burst of connections must complete its
    handshakes in the listen queue: with socketserver's backlog of 5 the kernel drops the rest, and each then
    stalls for SYN retransmissions (the load tests' rare 30 s timeouts, rollout/httpd.py)."""
    import socket

    from rollout.httpd import LISTEN_BACKLOG, BoundedHTTPServer, LimitedHandler

    server = BoundedHTTPServer(("127.0.0.1", 0), LimitedHandler)  # listening, never serving
    conns, refused = [], 0
    try:
        for _ in range(40):
            try:
                conns.append(socket.create_connection(server.server_address[:2], timeout=0.5))
            except OSError:  # the SYN was dropped: the connect timed out
                refused += 1
    finally:
        for c in conns:
            c.close()
        server.server_close()
    assert LISTEN_BACKLOG >= 40 and refused == 0, refused

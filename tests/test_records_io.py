"""Sharded ArrayRecord datasets: round trip, manifest, atomic writes, clear errors, grain compatibility."""

import dataclasses
import datetime
import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap

import pytest
from array_record.python.array_record_module import ArrayRecordWriter

from tgpo_jax.data.io import (
    MANIFEST,
    DatasetError,
    DatasetReader,
    Manifest,
    ShardInfo,
    decode_record,
    read_manifest,
    verify_dataset,
    write_dataset,
)
from tgpo_jax.data.schema import SCHEMA_VERSION, Branch, NodeRecord, SchemaError

CMDS = ["CLICK [button 'Buy']", "TYPE [textbox 'Search'] [red shoes]", "SCROLL [DOWN]", "GO_BACK", "STOP [done]"]


def make_records(n: int, seed: int = 0) -> list[NodeRecord]:
    rng = random.Random(seed)
    recs = []
    for k in range(n):
        branches = []
        for b in range(rng.randint(1, 4)):
            n_s, n_f = rng.randint(0, 3), rng.randint(0, 3)
            branches.append(
                Branch(
                    action=f"Thought: step {k}.{b} — café 价格\n{rng.choice(CMDS)}",
                    command=rng.choice(CMDS),
                    q=round(rng.uniform(-1.5, 4.0), 6),
                    rewards={
                        "r_acc": rng.choice([0.0, 1.0]),
                        "r_format": 1.0,
                        "r_red": rng.choice([0.0, -1.0]),
                        "r_subgoal": rng.random(),
                        "r": rng.uniform(-1, 5),
                    },
                    n_total=n_s + n_f + rng.randint(0, 1),
                    n_success=n_s,
                    n_failed=n_f,
                    on_success_path=n_s > 0,
                    reaches_success=rng.random() < 0.5,
                    behaviour_logprob=None if rng.random() < 0.5 else -rng.uniform(0, 50),
                )
            )
        recs.append(
            NodeRecord(
                task_id=f"task-{k % 17}",
                node_id=f"n{k}",
                prompt=[
                    {"role": "system", "content": "You are a web agent."},
                    {"role": "user", "content": f"Task {k}: buy shoes\n[1] link 'Home'"},
                ],
                branches=branches,
                meta={"url": f"http://shop.test/item?id={k}", "depth": k % 7, "split": "train"},
            )
        )
    return recs


def global_order(recs, num_shards):
    """Round-robin writing puts record k at shard k % n, position k // n; global order is shard by shard."""
    return [r for s in range(num_shards) for r in recs[s::num_shards]]


@pytest.fixture()
def dataset(tmp_path):
    recs = make_records(300)
    out = str(tmp_path / "ds")
    m = write_dataset(recs, out, num_shards=3, config={"alpha": 3.0, "q": "mean"}, extra={"conflict_rate": 0.25})
    return recs, out, m


def test_round_trip(dataset):
    recs, out, m = dataset
    with DatasetReader(out) as reader:
        assert len(reader) == 300 and reader.manifest == m
        expected = global_order(recs, 3)
        for i in range(len(reader)):
            assert reader[i] == expected[i]
        assert reader[-1] == expected[-1]
        assert isinstance(reader[5].prompt, list) and isinstance(reader[5].branches[0].rewards, dict)
        with pytest.raises(IndexError):
            reader[300]
    assert sorted(os.listdir(out)) == [
        "manifest.json",
        "nodes-00000-of-00003.array_record",
        "nodes-00001-of-00003.array_record",
        "nodes-00002-of-00003.array_record",
    ]


def test_manifest_counts_and_checksums(dataset):
    recs, out, m = dataset
    assert read_manifest(out) == m
    assert Manifest.from_dict(json.loads(json.dumps(m.to_dict()))) == m
    assert m.schema_version == SCHEMA_VERSION and m.format == "tgpo-nodes" and m.num_records == 300
    datetime.datetime.fromisoformat(m.created)
    assert m.counts == {
        "nodes": 300,
        "branches": sum(len(r.branches) for r in recs),
        "tasks": 17,
        "multi_branch_nodes": sum(len(r.branches) >= 2 for r in recs),
    }
    assert m.config == {"alpha": 3.0, "q": "mean"} and m.extra == {"conflict_rate": 0.25}
    for s in m.shards:
        assert s.num_records == 100
        with open(os.path.join(out, s.file), "rb") as fh:
            assert s.sha256 == hashlib.sha256(fh.read()).hexdigest()
    assert verify_dataset(out) == m
    assert DatasetReader(out, verify=True).manifest == m


def test_more_shards_than_records(tmp_path):
    recs = make_records(2)
    m = write_dataset(recs, str(tmp_path), num_shards=4)
    assert [s.num_records for s in m.shards] == [1, 1, 0, 0]
    reader = DatasetReader(str(tmp_path), verify=True)
    assert [reader[i] for i in range(len(reader))] == recs


def _failing(recs, at):
    for k, r in enumerate(recs):
        if k == at:
            raise RuntimeError("killed mid-write")
        yield r


def test_interrupted_write_leaves_nothing_valid(tmp_path):
    out = str(tmp_path / "ds")
    with pytest.raises(RuntimeError, match="killed"):
        write_dataset(_failing(make_records(100), 57), out, num_shards=3)
    assert os.listdir(out) == []  # no manifest, no shards, no tmp files
    with pytest.raises(DatasetError, match="no manifest.json") as e:
        DatasetReader(out)
    assert out in str(e.value)
    # an invalid record is the same kind of mid-write failure
    bad = make_records(10)
    bad[4] = dataclasses.replace(bad[4], prompt=[])
    with pytest.raises(SchemaError):
        write_dataset(bad, out, num_shards=2)
    assert os.listdir(out) == []


def test_interrupted_overwrite_invalidates_old_dataset(dataset):
    _, out, _ = dataset
    with pytest.raises(RuntimeError):
        write_dataset(_failing(make_records(50, seed=1), 20), out, num_shards=3, overwrite=True)
    assert MANIFEST not in os.listdir(out) and not [f for f in os.listdir(out) if f.startswith(".tmp-")]
    with pytest.raises(DatasetError):
        DatasetReader(out)


def test_hard_kill_leaves_only_tmp_files(tmp_path):
    """os._exit mid-write (no cleanup runs): leftovers are .tmp-* files, never shards or a manifest."""
    out = str(tmp_path / "ds")
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r})
        from tests.test_records_io import make_records
        from tgpo_jax.data.io import write_dataset
        def gen():
            for k, r in enumerate(make_records(40)):
                if k == 25:
                    os._exit(3)
                yield r
        write_dataset(gen(), {out!r}, num_shards=2)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 3, proc.stderr
    left = os.listdir(out)
    assert left and all(f.startswith(".tmp-") and not f.endswith(".array_record") for f in left)
    with pytest.raises(DatasetError, match="no manifest.json"):
        read_manifest(out)
    # a fresh write into the same directory succeeds (no manifest means no dataset to protect)
    recs = make_records(40)
    write_dataset(recs, out, num_shards=2)
    assert len(DatasetReader(out, verify=True)) == 40


def test_overwrite(dataset):
    _, out, m = dataset
    with pytest.raises(DatasetError, match="already exists"):
        write_dataset(make_records(5), out, num_shards=3)
    assert verify_dataset(out) == m  # refused write touched nothing
    new = make_records(8, seed=2)
    m2 = write_dataset(new, out, num_shards=2, overwrite=True)
    assert sorted(f for f in os.listdir(out) if f.endswith(".array_record")) == [
        "nodes-00000-of-00002.array_record",
        "nodes-00001-of-00002.array_record",
    ]  # old 3-shard files gone
    reader = DatasetReader(out, verify=True)
    assert reader.manifest == m2 and [reader[i] for i in range(8)] == global_order(new, 2)


def _edit_manifest(out, **changes):
    path = os.path.join(out, MANIFEST)
    with open(path) as fh:
        d = json.load(fh)
    d.update(changes)
    with open(path, "w") as fh:
        json.dump(d, fh)


def test_manifest_errors(dataset, tmp_path):
    _, out, _ = dataset
    _edit_manifest(out, schema_version=99)
    with pytest.raises(DatasetError, match="schema_version 99"):
        DatasetReader(out)
    _edit_manifest(out, schema_version=SCHEMA_VERSION)
    os.unlink(os.path.join(out, "nodes-00001-of-00003.array_record"))
    with pytest.raises(DatasetError, match="shard nodes-00001-of-00003.array_record .* missing"):
        DatasetReader(out)
    with open(os.path.join(out, MANIFEST), "w") as fh:
        fh.write("{truncated")
    with pytest.raises(DatasetError, match="manifest.json is unreadable") as e:
        read_manifest(out)
    assert os.path.join(out, MANIFEST) in str(e.value)  # the whole path: the pipeline names the stage that wrote it
    with pytest.raises(DatasetError, match="no manifest.json"):
        read_manifest(str(tmp_path / "nowhere"))


def _write_shard(path, payloads):
    w = ArrayRecordWriter(path, "group_size:1")
    for p in payloads:
        w.write(p)
    w.close()


def _sha(path):
    with open(path, "rb") as fh:
        return hashlib.sha256(fh.read()).hexdigest()


def test_corrupt_records_name_file_and_index(tmp_path):
    good = make_records(5)
    v99 = good[3].to_json() | {"schema_version": 99}
    payloads = [good[2].to_bytes(), b"{not json", good[3].to_bytes(), json.dumps(v99).encode(), good[4].to_bytes()]
    files = ["nodes-00000-of-00002.array_record", "nodes-00001-of-00002.array_record"]
    _write_shard(str(tmp_path / files[0]), [good[0].to_bytes(), good[1].to_bytes()])
    _write_shard(str(tmp_path / files[1]), payloads)
    m = Manifest(
        schema_version=SCHEMA_VERSION,
        format="tgpo-nodes",
        created="2025-01-01T00:00:00+00:00",
        num_records=7,
        shards=(ShardInfo(files[0], 2, _sha(tmp_path / files[0])), ShardInfo(files[1], 5, _sha(tmp_path / files[1]))),
        counts={},
        config={},
        extra={},
    )
    (tmp_path / MANIFEST).write_text(json.dumps(m.to_dict()))

    reader = DatasetReader(str(tmp_path), verify=True)  # checksums are fine: the damage is inside records
    assert [reader[i] for i in (0, 1, 2, 4, 6)] == [good[0], good[1], good[2], good[3], good[4]]
    with pytest.raises(DatasetError, match=r"nodes-00001-of-00002\.array_record record 1 \(global index 3\)"):
        reader[3]
    with pytest.raises(
        DatasetError,
        match=r"nodes-00001-of-00002\.array_record record 3 \(global index 5\).*"
        r"schema_version 99",
    ):
        reader[5]
    with pytest.raises(DatasetError, match="somewhere 7: cannot decode"):
        decode_record(b"[1, 2]", "somewhere 7")
    with pytest.raises(DatasetError, match="somewhere 8"):
        decode_record(json.dumps(good[0].to_json() | {"prompt": ["no dict"]}).encode(), "somewhere 8")


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_shard_fails_verification(dataset, damage):
    _, out, _ = dataset
    path = os.path.join(out, "nodes-00002-of-00003.array_record")
    data = bytearray(open(path, "rb").read())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[len(data) // 3] ^= 0xFF
    with open(path, "wb") as fh:
        fh.write(data)
    read_manifest(out)  # the manifest itself is fine
    with pytest.raises(DatasetError, match=r"nodes-00002-of-00003\.array_record: sha256"):
        verify_dataset(out)
    with pytest.raises(DatasetError, match=r"nodes-00002-of-00003\.array_record"):
        DatasetReader(out, verify=True)
    # read without the checksum pass: Riegeli's own error is wrapped with the file and the record
    with pytest.raises(
        DatasetError,
        match=r"nodes-00002-of-00003\.array_record(: cannot open|: holds \d+ records"
        r"| record \d+ "
        r"\(global index \d+\): cannot be read)",
    ):
        reader = DatasetReader(out)
        for i in range(len(reader)):
            reader[i]


def test_grain_source_matches_reader(dataset):
    import grain

    _, out, _ = dataset
    reader = DatasetReader(out)
    source = grain.sources.ArrayRecordDataSource(reader.paths)
    assert len(source) == len(reader)
    for i in range(len(reader)):
        raw = source[i]
        assert raw == reader.read_bytes(i)
        assert decode_record(raw, f"grain {i}") == reader[i]


@pytest.mark.parametrize("steps", [(1, None), (0, 0)])
def test_step_occurrences_below_trajectory_counts_are_refused(steps):
    """Each trajectory that takes a branch is at least one step occurrence; both counts or neither."""
    rec = make_records(1)[0]
    b = dataclasses.replace(rec.branches[0], n_total=2, n_success=1, n_failed=1)
    with pytest.raises(SchemaError, match="step occurrences"):
        dataclasses.replace(b, steps_success=steps[0], steps_failed=steps[1]).validate("b")
    dataclasses.replace(b, steps_success=3, steps_failed=1).validate("b")


def test_exported_pairs_are_the_datasets_pairs(dataset, tmp_path):
    """trees/export_pairs.py: one JSONL row per preference pair of every node, in TRL's conversational
    format, with the reward-gap weight and both Qs; normalised weights average 1."""
    import json

    from trees.export_pairs import export_pairs
    from tgpo_jax.data.examples import preference_pairs

    _, out, _ = dataset
    want = [
        (r.task_id, r.node_id, r.branches[p.chosen].action, r.branches[p.rejected].action, p.weight)
        for r in DatasetReader(out)
        for p in preference_pairs(r)
    ]
    path = str(tmp_path / "pairs.jsonl")
    assert export_pairs(out, path) == len(want) > 0
    rows = [json.loads(line) for line in open(path, encoding="utf-8")]
    assert [
        (r["task_id"], r["node_id"], r["chosen"][0]["content"], r["rejected"][0]["content"], r["weight"]) for r in rows
    ] == want
    assert all(r["q_chosen"] > r["q_rejected"] and r["prompt"][0]["role"] == "system" for r in rows)
    export_pairs(out, path, normalise=True)
    weights = [json.loads(line)["weight"] for line in open(path, encoding="utf-8")]
    assert sum(weights) / len(weights) == pytest.approx(1.0)


def test_value_source_version_2_and_version_1_records():
    rec = make_records(1)[0]
    assert rec.value_source == "tree" and rec.schema_version == 2
    mcts = dataclasses.replace(rec, value_source="mcts")
    assert NodeRecord.from_bytes(mcts.to_bytes()) == mcts  # round trip keeps the source
    v1 = {k: v for k, v in rec.to_json().items() if k != "value_source"} | {"schema_version": 1}
    assert NodeRecord.from_json(v1) == rec  # a dataset written before version 2: the tree's values
    with pytest.raises(SchemaError, match="value_source 'bogus'"):
        NodeRecord.from_json(rec.to_json() | {"value_source": "bogus"})
    with pytest.raises(SchemaError, match="version 1 has a value_source"):
        NodeRecord.from_json(v1 | {"value_source": "mcts"})

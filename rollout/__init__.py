"""Collection: web environments, the Playwright harness, policies, and recording of browser episodes.

The bottom of the web side: dataset building (``trees``), the experiment (``experiment``) and serving (``serving``)
import it; it imports none of them."""

"""Index generations, gated rebuilds: the assets that index, evaluate and publish a rebuilt
generation (assets.py), the jobs that run or discard one (jobs.py), and the folder sensor's part
in rebuilds (sensors.py)."""

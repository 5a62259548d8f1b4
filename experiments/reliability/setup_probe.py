"""The probes' inputs under PROBE_DIR: a tiny random BERT (tests.helpers) and a data root with 400 sentences, STS-B and SICK dev rows."""

import os
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WORK = os.environ.get("PROBE_DIR", os.path.join(tempfile.gettempdir(), "jaxcse-probe"))  # setup_probe.py writes here.
sys.path.insert(0, REPO)
from tests import helpers

root = os.path.join(WORK, "data")
real = os.environ["JAXCSE_DATA_DIR"]  # SentEval and corpora/wiki_offline.txt
if not os.path.exists(os.path.join(WORK, "tiny")):
  helpers.make_tiny_model_dir(os.path.join(WORK, "tiny"))
sts = os.path.join(root, "senteval/downstream/STS/STSBenchmark")
sick = os.path.join(root, "senteval/downstream/SICK")
os.makedirs(sts, exist_ok=True)
os.makedirs(sick, exist_ok=True)
os.makedirs(os.path.join(root, "corpora"), exist_ok=True)
for src, dst, n in [
  ("senteval/downstream/STS/STSBenchmark/sts-dev.csv", os.path.join(sts, "sts-dev.csv"), 60),
  ("senteval/downstream/STS/STSBenchmark/sts-test.csv", os.path.join(sts, "sts-test.csv"), 60),
  ("senteval/downstream/SICK/SICK_trial.txt", os.path.join(sick, "SICK_trial.txt"), 41),
  ("senteval/downstream/SICK/SICK_test_annotated.txt", os.path.join(sick, "SICK_test_annotated.txt"), 41),
]:
  lines = open(os.path.join(real, src), encoding="utf-8").readlines()[:n]
  open(dst, "w", encoding="utf-8").writelines(lines)
with open(os.path.join(real, "corpora/wiki_offline.txt"), encoding="utf-8") as f:
  head = [next(f) for _ in range(400)]
open(os.path.join(root, "corpora/small.txt"), "w", encoding="utf-8").writelines(head)
print("ok")

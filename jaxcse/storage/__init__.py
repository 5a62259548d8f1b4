"""Where models live and how they are found: workdirs, checkpoints, Hugging Face folders, hub ids, s-t folders.

workdir.py      a training workdir: its layout, lock, start point, resume checks, what a reader is served
checkpoints.py  orbax checkpoints, verified, never half-written
description.py  a model described apart from its weights (a workdir's model/), vouched for by its record
loading.py      a model for inference from anything a user points at (workdir, checkpoint, folder, hub id)
hub.py          the model resolver (resolve): what a name or path is (workdir, folder, shipped, package, hub id,
                published shape) and where its files are; published_shapes.json
st_format.py    the sentence-transformers folder format, with numpy only
model_card.py   the exported folder's README.md, as sentence-transformers writes one
runs.py         training runs read back (metrics.jsonl, results JSONs) for figures and reports
"""

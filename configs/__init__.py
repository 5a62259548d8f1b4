"""The training configs (ml_collections): the papers' runs, the quickstart and MLM pretraining; `--config NAME` picks one."""

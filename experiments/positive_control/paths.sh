# The positive control's paths, each overridable from the environment; sourced by the run_*.sh and *_check.sh
# scripts after they set HERE (this folder). SIMCSE: the official checkout (simcse_official.patch applied, and
# simcse_crop.patch for run_official_horizon.sh, both and simcse_word_deletion.patch for run_official_budget.sh);
# VENV: its Python (README, "What ran"); WORK: run folders; DATA: the shared data root; PC_CODE / PC_VENV: the
# frozen jaxcse that scores; JAXCSE_CODE / JAXCSE_VENV: the jaxcse whose code writes sentences or runs the checks;
# ENCODER: the raw encoder every run starts from.
SIMCSE=${SIMCSE:-/work/simcse-official}; VENV=${VENV:-/work/venv-simcse}; WORK=${WORK:-/work/pc-runs}
DATA=${DATA:-/work/shared/data}; PC_CODE=${PC_CODE:-/work/pc-code}; PC_VENV=${PC_VENV:-/work/venv-old}
JAXCSE_CODE=${JAXCSE_CODE:-$(cd "$HERE/../.." && pwd)}; JAXCSE_VENV=${JAXCSE_VENV:-/work/venv-new}
ENCODER=${ENCODER:-/work/main/jaxcse/pretrained/bert-mini-wiki-uncased}

"""The commands' plumbing: absl flags, the configs shipped with jaxcse by name, ``--help``, one-line mistakes.

``jaxcse.train`` (``main``/``run``) and ``jaxcse.compile`` parse their flags here: ``parse_flags`` resolves
``--config NAME`` to a shipped config, prints the command's own help, and turns a mistake into one line (exit 1).
``train_flags``, ``one_line_errors`` and ``print_train_summary`` are the train command around
``train.train_and_evaluate`` (the flax examples' ``main.py``).
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import os
import re
import sys
from collections.abc import Iterator

import ml_collections

from jaxcse import data as data_lib
from jaxcse.core.errors import USER_ERRORS, JaxcseError, command_name, print_error
from jaxcse.training import distributed


def define_train_flags() -> None:
  """The train command's flags (``--config``, ``--workdir``, ``--data_dir``, ``--restart``, the processes')."""
  from absl import flags
  from ml_collections import config_flags

  config_flags.DEFINE_config_file(
    "config",
    None,
    "Training config: a file (configs/base.py) or the name of a config "
    "shipped with jaxcse (base, quickstart, simcse_sup, mixcse, dclr, pretrain_mlm, ...).",
    lock_config=True,
  )
  flags.DEFINE_string("workdir", None, "Directory for checkpoints, metrics and the model description.")
  flags.DEFINE_string("data_dir", None, f"Data root (default: config.data.data_dir, then ${data_lib.DATA_DIR_ENV}).")
  flags.DEFINE_bool(
    "restart",
    False,
    "Start over in a workdir that holds a previous run (deletes its checkpoints, "
    "description and metrics) instead of resuming it.",
  )
  # Several processes (hosts); see distributed.initialize_distributed. Defaults come from the environment so that a
  # launcher can set them per process.
  flags.DEFINE_bool(
    "distributed",
    os.environ.get("JAXCSE_DISTRIBUTED", "") not in ("", "0"),
    "Join a multi-process run, letting JAX detect the cluster (Cloud TPU pods, SLURM, Open MPI, "
    "GKE); env JAXCSE_DISTRIBUTED=1.",
  )
  flags.DEFINE_string(
    "coordinator_address",
    os.environ.get("JAX_COORDINATOR_ADDRESS"),
    "host:port of process 0, the same for every process; env JAX_COORDINATOR_ADDRESS.",
  )
  flags.DEFINE_integer(
    "num_processes", _env_int("JAX_NUM_PROCESSES"), "Number of processes in the run; env JAX_NUM_PROCESSES."
  )
  flags.DEFINE_integer(
    "process_id", _env_int("JAX_PROCESS_ID"), "This process's index, 0 .. num_processes - 1; env JAX_PROCESS_ID."
  )
  flags.DEFINE_bool(
    "prune_set_aside",
    False,
    "Remove the workdir's set-aside checkpoints (checkpoints/set_aside/: "
    "damaged ones, and intact ones the run no longer uses) and nothing else, then exit; --config is "
    "then not needed.",
  )
  flags.mark_flags_as_required(["workdir"])
  flags.register_multi_flags_validator(
    ["config", "prune_set_aside"],
    lambda values: values["config"] is not None or values["prune_set_aside"],
    message="flag --config must have a value other than None.",
  )


def _env_int(name: str) -> int | None:
  value = os.environ.get(name)
  if value is None or value == "":
    return None
  try:
    return int(value)
  except ValueError:
    raise SystemExit(f"error: environment variable {name}={value!r} is not an integer") from None


CONFIGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")  # jaxcse/configs


def resolve_config(value: str) -> str:
  """``--config``'s file: ``value`` when it is a path, else the config shipped with jaxcse of that name (``dclr``)."""
  path = value.split(":", 1)[0]  # ml_collections passes ``file.py:args`` on to the config's get_config.
  if os.path.exists(path) or path.endswith(".py") or os.sep in path:
    return value
  packaged = os.path.join(CONFIGS_DIR, f"{path}.py")
  return packaged + value[len(path) :] if os.path.isfile(packaged) else value


def shipped_configs() -> list[str]:
  return sorted(f[:-3] for f in os.listdir(CONFIGS_DIR) if f.endswith(".py") and not f.startswith("_"))


TRAIN_HELP = """\
usage: {prog} --config NAME|FILE.py --workdir DIR [--config.FIELD=VALUE ...] [--data_dir DIR] [--restart]
       {prog} --workdir DIR --prune_set_aside

Train a sentence encoder as a config says (unsupervised or supervised SimCSE, MixCSE, DCLR, or masked-LM
pretraining), scoring STS-B dev as it goes and keeping the best checkpoint in the workdir. Run the same command
again to resume an interrupted run. Without a data root, the quickstart's data shipped with jaxcse is used.

  --config NAME          a config shipped with jaxcse, or a config file (FILE.py); shipped:
{configs}
  --config.FIELD=VALUE   override one field of the config, e.g. --config.train.max_steps=100 (the config file
                         lists every field with a comment)

A mistake (an unknown flag or config field, a config that does not exist or does not load, bad data) is one line
on stderr, with a suggestion where there is one, and exit status 1, before anything is written; Ctrl-C exits 130.

example: {prog} --config quickstart --workdir workdirs/quickstart
"""


def print_train_help(full: bool) -> None:
  """``--help``: what the command does, its usage and its own flags; ``--helpfull``: every flag absl knows."""
  import textwrap

  from absl import flags

  configs = textwrap.fill(", ".join(shipped_configs()), width=116, initial_indent=" " * 25, subsequent_indent=" " * 25)
  print(TRAIN_HELP.format(prog=command_name("jaxcse.train"), configs=configs))
  if full:
    print("flags (all):" + flags.FLAGS.get_help())
  else:
    own = flags.FLAGS.module_help(flags.FLAGS.find_module_defining_flag("workdir")).strip().split("\n", 1)[1]
    print("flags:\n" + own + "\n\n(--helpfull: also the flags of absl, jax and the libraries)")


class FlagError(JaxcseError, ValueError):
  """A mistake on the command line: an unknown flag or config field, a config that cannot be found or loaded."""


def _closest(word: str, choices: list[str]) -> str:
  close = difflib.get_close_matches(word, choices, n=1)
  return f"; did you mean {close[0]}?" if close else ""


def check_config_file(value: str) -> str:
  """``--config``'s file (``resolve_config`` applied), which must exist; else a ``FlagError`` with a suggestion."""
  resolved = resolve_config(value)
  path = resolved.split(":", 1)[0]
  if os.path.isfile(path):
    return path
  if os.path.exists(path):
    raise FlagError(f"--config {value}: {path} is not a file")
  if not path.endswith(".py") and os.sep not in path:  # A name: the shipped configs are the candidates.
    shipped = shipped_configs()
    raise FlagError(
      f"--config {value}: no such file, and no config of that name ships with jaxcse"
      f"{_closest(path, shipped)} (shipped: {', '.join(shipped)})"
    )
  folder = os.path.dirname(path) or "."
  if not os.path.isdir(folder):
    raise FlagError(f"--config {value}: no such file ({folder} is not a folder)")
  siblings = sorted(f for f in os.listdir(folder) if f.endswith(".py"))
  close = difflib.get_close_matches(os.path.basename(path), siblings, n=1)
  hint = f"; did you mean {os.path.join(os.path.dirname(path), close[0])}?" if close else ""
  raise FlagError(f"--config {value}: no such file{hint}")


def _config_error(error: BaseException, config_path: str) -> FlagError | None:
  """The one-line error for an exception raised while ml_collections loaded the config file; None if it is not one.

  Exceptions raised by the file's own code (``get_config`` raising ``NameError``, ``ZeroDivisionError``, ...) name
  the file and the line of the file where they were raised; a file without ``get_config`` says so.
  """
  same_file = (
    isinstance(error, SyntaxError)
    and error.filename
    and os.path.abspath(error.filename) == os.path.abspath(config_path)
  )
  if same_file:
    return FlagError(f"{config_path}:{error.lineno}: {error.msg} (the config file does not parse)")
  line = None
  traceback = error.__traceback__
  while traceback is not None:  # The innermost frame of the config file's own code.
    if os.path.abspath(traceback.tb_frame.f_code.co_filename) == os.path.abspath(config_path):
      line = traceback.tb_lineno
    traceback = traceback.tb_next
  if line is not None:
    message = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return FlagError(
      f"{config_path}:{line}: loading the config raised {type(error).__name__}{': ' + message if message else ''}"
    )
  if isinstance(error, AttributeError) and "get_config" in str(error):
    return FlagError(
      f"{config_path}: defines no get_config() (a config file is a module whose get_config() returns "
      "an ml_collections.ConfigDict, as in the shipped configs)"
    )
  return None


def _unknown_field(error: BaseException, argv: list[str]) -> FlagError:
  """ml_collections' error for ``--config.<field>`` that names no field, as one line with its suggestion."""
  # ml_collections raises KeyError, or AttributeError(KeyError(...)).
  inner = error.args[0] if error.args and isinstance(error.args[0], BaseException) else error
  text = str(inner.args[0] if inner.args else inner)
  # ml_collections' KeyError carries "name'\nDid you mean "names" instead of "name"?": the field, then a suggestion.
  missing = text.splitlines()[0].strip("'\" ")
  suggestion = re.search(r'Did you mean "([^"]+)"', text)
  fields = [a.split("=")[0].lstrip("-") for a in argv if a.startswith("--config.")]
  named = [f for f in fields if missing in f.split(".")[1:]] or fields  # The override(s) that name it.
  hint = ""
  parts = named[0].split(".") if len(named) == 1 else []
  if suggestion and missing in parts:  # The override with the field replaced by ml_collections' suggestion.
    hint = f"; did you mean {'.'.join(parts[: parts.index(missing)] + [suggestion.group(1)])}?"
  elif suggestion:
    hint = f"; did you mean {suggestion.group(1)!r}?"
  return FlagError(f"unknown config field {missing!r} in {', '.join(named)}{hint} (the config file lists every field)")


def parse_flags(argv: list[str], module: str = "jaxcse.train", help_printer=None) -> list[str]:
  """absl's flag parsing, with a mistake reported as one line (exit 1) instead of a traceback.

  ``--config NAME`` selects a config shipped with jaxcse (``base``, ``quickstart``, ``dclr``, ...). ``--help``
  and ``--helpfull`` print the help (``help_printer(full)``, default ``print_train_help``) and exit 0, whatever else is
  on the line. ``module`` names the command a mistake's message points to (``jaxcse.compile`` parses the same
  config flags). Mistakes exit 1, like every other user error of every command (``errors.cli``): an unknown flag or
  config field (with absl's or ml_collections' suggestion), a config name or file that does not exist (with the
  closest shipped config or sibling file), a config file that does not parse, has no ``get_config``, raises in it
  (file and line) or returns something other than a ConfigDict.
  """
  try:
    return _parse_flags(argv, module, help_printer)
  except FlagError as e:
    sys.exit(print_error(e))


def _parse_flags(argv: list[str], module: str, help_printer) -> list[str]:
  from absl import flags

  argv = list(argv)
  for arg in argv[1:]:
    if arg == "--":
      break
    if arg.split("=", 1)[0] in ("--help", "-help", "-h", "--helpshort", "-helpshort", "-?", "--helpfull", "-helpfull"):
      try:
        (help_printer or print_train_help)(full="helpfull" in arg)
        sys.stdout.flush()
      except BrokenPipeError:  # `jaxcse-train --help | head`: the reader has what it wanted.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
      sys.exit(0)
  config_path = None
  for i, arg in enumerate(argv):
    if arg == "--config" and i + 1 < len(argv):
      config_path = check_config_file(argv[i + 1])
      argv[i + 1] = resolve_config(argv[i + 1])
    elif arg.startswith("--config="):
      config_path = check_config_file(arg[len("--config=") :])
      argv[i] = "--config=" + resolve_config(arg[len("--config=") :])
  try:
    rest = flags.FLAGS(argv)
  except Exception as e:  # noqa: BLE001 -- sorted below: the user's config file's errors, then absl's and ours.
    found = _config_error(e, config_path) if config_path else None
    if found is not None:
      raise found from None
    if isinstance(e, (KeyError, AttributeError)):  # ml_collections: --config.<field> names no field of the config.
      raise _unknown_field(e, argv) from None
    if isinstance(e, (flags.Error, OSError, SyntaxError, TypeError, ValueError)):
      message = " ".join(str(e).split()).replace(" ?", "?") or type(e).__name__  # absl: "Did you mean: workdir ?"
      raise FlagError(
        f"{message} ({command_name(module)} --help lists the flags; shipped configs: {', '.join(shipped_configs())})"
      ) from None
    raise
  config = flags.FLAGS.config
  if config is not None and not isinstance(config, ml_collections.ConfigDict):  # None: not given (compile's list).
    raise FlagError(f"{config_path}: get_config() returned {type(config).__name__}, not an ml_collections.ConfigDict")
  return rest


def check_fields(config: ml_collections.ConfigDict, config_path: str) -> None:
  """Raises ``FlagError`` naming the fields of ``configs/base.py`` that a config file's config lacks.

  Training reads every one of them, some only after the workdir is written; a config file written for another
  jaxcse version, or by hand, may lack one.
  """
  import flax

  from jaxcse.configs import base

  have = flax.traverse_util.flatten_dict(config.to_dict(), sep=".")
  missing = [name for name in flax.traverse_util.flatten_dict(base.get_config().to_dict(), sep=".") if name not in have]
  if missing:
    shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
    raise FlagError(
      f"{config_path.split(':', 1)[0]}: the config lacks {shown} (every config has the fields of "
      "configs/base.py: start from base.get_config(), as the shipped configs do)"
    )


def train_flags() -> tuple[ml_collections.ConfigDict, str, bool]:
  """``(config, workdir, restart)`` of the parsed train flags, with ``--data_dir`` applied to the config.

  Also sets the console's logging (jaxcse's progress lines, not orbax's) and joins a multi-process run when the
  flags or the environment say so (``distributed.initialize_distributed``).
  """
  from absl import flags, logging as absl_logging

  # Orbax logs every save at INFO through absl; keep the console for our own progress lines.
  absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger("jaxcse").setLevel(logging.INFO)
  config = flags.FLAGS.config
  check_fields(config, flags.FLAGS["config"].config_filename)
  if flags.FLAGS.data_dir:
    config.data.data_dir = flags.FLAGS.data_dir
  distributed.initialize_distributed(
    flags.FLAGS.coordinator_address, flags.FLAGS.num_processes, flags.FLAGS.process_id, auto=flags.FLAGS.distributed
  )
  return config, flags.FLAGS.workdir, flags.FLAGS.restart


@contextlib.contextmanager
def one_line_errors() -> Iterator[None]:
  """A user error as one line (exit 1); Ctrl-C as one line (exit 130, the shell's code for SIGINT); no traceback."""
  try:
    yield
  except USER_ERRORS as e:
    sys.exit(print_error(e))
  except KeyboardInterrupt as e:  # The loop's own (train.Interrupted) says at which step and how to resume.
    print(str(e) or "interrupted; rerun the same command to resume", file=sys.stderr)
    sys.exit(130)


def print_train_summary(config: ml_collections.ConfigDict, workdir: str, summary: dict) -> None:
  """What a finished run prints: the first and best dev scores, and the command that evaluates it."""
  first = summary["first_eval"]
  if first is not None and first["step"] == 0:
    print(f"STS-B dev Spearman before training: {first['stsb_dev'] * 100:.2f}")
  if summary["best_metric"] is not None:
    print(f"best {config.eval.metric} x100: {summary['best_metric'] * 100:.2f} at step {summary['best_step']}")
  steps, every = summary["steps"], config.eval.every
  if not config.eval.at_end and steps % every:  # The model served is the best evaluated one: say what it misses.
    print(
      f"note: steps {steps - steps % every + 1}-{steps} were not evaluated (eval.at_end=False, eval.every="
      f"{every}): the best checkpoint, which evaluate, encode and export serve, predates them"
    )
  evaluate_it = command_name("jaxcse.train").replace("train", "evaluate")
  # The STS test sets ship with jaxcse, so this runs as printed, with or without a data root (one that is given, and
  # has the sets, is read instead: the same numbers).
  data_dir = f" --data_dir {config.data.data_dir}" if config.data.data_dir else ""
  print(f"evaluate it on STS12-16, STS-B and SICK-R: {evaluate_it} --model {workdir} --tasks sts{data_dir}")

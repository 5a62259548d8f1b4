"""The config commands' plumbing: ``--config`` and its overrides, the shipped configs by name, one-line mistakes.

``jaxcse.train`` and ``jaxcse.compile`` parse their flags with argparse, as every other command does
(``errors.ArgumentParser``); ``parse_with_overrides`` sets the ``--config.FIELD=VALUE`` overrides aside and
``load_config`` applies them with ml_collections, resolving ``--config NAME`` to a shipped config and turning a
mistake into one line (exit 1). ``train_parser``, ``train_flags``, ``one_line_errors`` and ``print_train_summary``
are the train command around ``train.train_and_evaluate`` (the flax examples' ``main.py``).
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import sys
from collections.abc import Iterator

import ml_collections

from jaxcse import data as data_lib
from jaxcse.core import errors
from jaxcse.core.errors import USER_ERRORS, JaxcseError, command_name, print_error
from jaxcse.training import distributed

TRAIN_DESCRIPTION = """\
Train a sentence encoder as a config says (unsupervised or supervised SimCSE, MixCSE, DCLR, or masked-LM
pretraining), scoring STS-B dev as it goes and keeping the best checkpoint in the workdir. Run the same command
again to resume an interrupted run. Without a data root, the quickstart's data shipped with jaxcse is used.

shipped configs (--config NAME):
{configs}

--config.FIELD=VALUE overrides one field of the config, e.g. --config.train.max_steps=100 (the config file lists
every field with a comment); a mistake in one (an unknown field, a value of the wrong type) is one line, with a
suggestion where there is one. Ctrl-C exits 130, and the same command resumes.
"""

OVERRIDES = "[--config.FIELD=VALUE ...]"


def train_parser() -> errors.ArgumentParser:
  """The train command's flags: ``--config``, ``--workdir``, ``--data_dir``, ``--restart``, the processes'."""
  import argparse
  import textwrap

  prog = command_name("jaxcse.train")
  configs = textwrap.fill(", ".join(shipped_configs()), width=116, initial_indent="  ", subsequent_indent="  ")
  parser = errors.ArgumentParser(
    prog=prog,
    usage=f"%(prog)s --config NAME|FILE.py --workdir DIR {OVERRIDES} [--data_dir DIR] [--restart]\n"
    "       %(prog)s --workdir DIR --prune_set_aside",
    description=TRAIN_DESCRIPTION.format(configs=configs),
    epilog=f"example: {prog} --config quickstart --workdir workdirs/quickstart",
    formatter_class=argparse.RawDescriptionHelpFormatter,
  )
  add_config_argument(parser, "a config shipped with jaxcse (see above), or a config file (FILE.py)")
  parser.add_argument(
    "--workdir", metavar="DIR", help="directory for checkpoints, metrics and the model description (required)"
  )
  parser.add_argument(
    "--data_dir", metavar="DIR", help=f"data root (default: config.data.data_dir, then ${data_lib.DATA_DIR_ENV})"
  )
  parser.add_argument(
    "--restart",
    action="store_true",
    help="start over in a workdir that holds a previous run (deletes its checkpoints, description and metrics) "
    "instead of resuming it",
  )
  parser.add_argument(
    "--prune_set_aside",
    action="store_true",
    help="remove the workdir's set-aside checkpoints (checkpoints/set_aside/: damaged ones, and intact ones the "
    "run no longer uses) and nothing else, then exit; --config is then not needed",
  )
  # Several processes (hosts); see distributed.initialize_distributed. Defaults come from the environment so that a
  # launcher can set them per process.
  processes = parser.add_argument_group("several processes (hosts)")
  processes.add_argument(
    "--distributed",
    action=argparse.BooleanOptionalAction,
    default=os.environ.get("JAXCSE_DISTRIBUTED", "") not in ("", "0"),
    help="join a multi-process run, letting JAX detect the cluster (Cloud TPU pods, SLURM, Open MPI, GKE); env "
    "JAXCSE_DISTRIBUTED=1",
  )
  processes.add_argument(
    "--coordinator_address",
    metavar="HOST:PORT",
    default=os.environ.get("JAX_COORDINATOR_ADDRESS"),
    help="host:port of process 0, the same for every process; env JAX_COORDINATOR_ADDRESS",
  )
  processes.add_argument(
    "--num_processes",
    type=int,
    metavar="N",
    default=_env_int("JAX_NUM_PROCESSES"),
    help="number of processes in the run; env JAX_NUM_PROCESSES",
  )
  processes.add_argument(
    "--process_id",
    type=int,
    metavar="I",
    default=_env_int("JAX_PROCESS_ID"),
    help="this process's index, 0 .. num_processes - 1; env JAX_PROCESS_ID",
  )
  return parser


def parse_train_arguments(argv: list[str]):
  """The train command's flags (``train_parser``), its config's overrides kept as they were typed.

  A mistake in a flag exits 1 with one line (``errors.ArgumentParser``); the config itself loads in ``train_flags``.
  """
  parser = train_parser()
  args = parse_with_overrides(parser, argv)
  if args.workdir is None:
    parser.error("--workdir is required")
  if args.config is None and not args.prune_set_aside:
    parser.error("--config is required (a shipped config's name or a config file)")
  return args


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


def _unknown_field(error: BaseException, overrides: list[str]) -> FlagError:
  """ml_collections' error for ``--config.<field>`` that names no field, as one line with its suggestion."""
  # ml_collections raises KeyError, or AttributeError(KeyError(...)).
  inner = error.args[0] if error.args and isinstance(error.args[0], BaseException) else error
  text = str(inner.args[0] if inner.args else inner)
  # ml_collections' KeyError carries "name'\nDid you mean "names" instead of "name"?": the field, then a suggestion.
  missing = text.splitlines()[0].strip("'\" ")
  suggestion = re.search(r'Did you mean "([^"]+)"', text)
  fields = [a.split("=")[0].lstrip("-") for a in overrides if a.startswith("--config.")]
  named = [f for f in fields if missing in f.split(".")[1:]] or fields  # The override(s) that name it.
  hint = ""
  parts = named[0].split(".") if len(named) == 1 else []
  if suggestion and missing in parts:  # The override with the field replaced by ml_collections' suggestion.
    hint = f"; did you mean {'.'.join(parts[: parts.index(missing)] + [suggestion.group(1)])}?"
  elif suggestion:
    hint = f"; did you mean {suggestion.group(1)!r}?"
  return FlagError(f"unknown config field {missing!r} in {', '.join(named)}{hint} (the config file lists every field)")


def add_config_argument(parser, help: str) -> None:
  """``--config NAME|FILE.py``; its ``--config.FIELD=VALUE`` overrides are split off by ``parse_with_overrides``."""
  parser.add_argument("--config", metavar="NAME|FILE.py", help=f"{help}; --config.FIELD=VALUE overrides one field")


def parse_with_overrides(parser, argv: list[str]):
  """``parser``'s arguments of ``argv``, with ``args.overrides``: the ``--config.FIELD[=VALUE]`` ones, in order.

  The overrides are not the parser's: their fields are the config's, known once it loads (``load_config``). An
  override without ``=`` takes the next argument as its value unless that is a flag (a boolean field alone is True).
  """
  rest, overrides = [], []
  argv = list(argv)
  i = 0
  while i < len(argv):
    arg = argv[i]
    if arg == "--":
      rest.extend(argv[i:])
      break
    if arg.startswith(("--config.", "--noconfig.")):
      overrides.append(arg)
      if "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
        overrides.append(argv[i + 1])
        i += 1
    else:
      rest.append(arg)
    i += 1
  args = parser.parse_args(rest)
  args.overrides = overrides
  if overrides and args.config is None:
    parser.error(f"{overrides[0].split('=', 1)[0]} overrides a field of --config, which is not given")
  return args


def load_config(value: str, overrides: list[str], module: str = "jaxcse.train") -> ml_collections.ConfigDict:
  """The config ``--config value`` names (a shipped config's name, or a file), with ``overrides`` applied.

  ml_collections' config-file flag loads the file and applies ``--config.FIELD=VALUE`` with each field's own type,
  on a flag registry of its own (nothing global). A mistake raises ``FlagError``, one line: an unknown config
  field (with ml_collections' suggestion), a config name or file that does not exist (with the closest shipped
  config or sibling file), a config file that does not parse, has no ``get_config``, raises in it (file and line)
  or returns something other than a ConfigDict, a value of the wrong type. ``module`` names the command a
  message points to (``jaxcse.compile`` loads the same configs).
  """
  from absl import flags
  from ml_collections import config_flags

  config_path = check_config_file(value)
  argv = [command_name(module), f"--config={resolve_config(value)}", *overrides]
  registry = flags.FlagValues()
  # sys_argv: the overrides are found in these arguments (ml_collections looks in sys.argv by default).
  config_flags.DEFINE_config_file("config", None, "the config", flag_values=registry, lock_config=True, sys_argv=argv)
  try:
    left = registry(argv)[1:]
  except Exception as e:  # noqa: BLE001 -- sorted below: the user's config file's errors, then absl's and ours.
    found = _config_error(e, config_path)
    if found is not None:
      raise found from None
    if isinstance(e, (KeyError, AttributeError)):  # ml_collections: --config.<field> names no field of the config.
      raise _unknown_field(e, overrides) from None
    if isinstance(e, (flags.Error, OSError, SyntaxError, TypeError, ValueError)):
      message = " ".join(str(e).split()).replace(" ?", "?") or type(e).__name__
      raise FlagError(
        f"{message} ({command_name(module)} --help lists the flags; shipped configs: {', '.join(shipped_configs())})"
      ) from None
    raise
  if left:  # A word after a boolean field's override (``--config.x word``): the field took no value.
    raise FlagError(
      f"unexpected argument {left[0]!r} after a --config.FIELD override (a boolean field takes none; give "
      f"--config.FIELD=VALUE) ({command_name(module)} --help lists the flags)"
    )
  config = registry.config
  if not isinstance(config, ml_collections.ConfigDict):
    raise FlagError(f"{config_path}: get_config() returned {type(config).__name__}, not an ml_collections.ConfigDict")
  return config


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


def train_flags(args) -> tuple[ml_collections.ConfigDict, str, bool]:
  """``(config, workdir, restart)`` of the train flags (``parse_train_arguments``), ``--data_dir`` applied.

  Loads the config with its overrides (``load_config``), sets the console's logging (``errors.console_logging``) and joins
  a multi-process run when the flags or the environment say so (``distributed.initialize_distributed``).
  """
  config = load_config(args.config, args.overrides)
  errors.console_logging(notes=True)
  check_fields(config, resolve_config(args.config))
  if args.data_dir:
    config.data.data_dir = args.data_dir
  distributed.initialize_distributed(
    args.coordinator_address, args.num_processes, args.process_id, auto=args.distributed
  )
  return config, args.workdir, args.restart


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
  """What a finished run prints: the selection metric before training and at its best, whether training beat the
  starting model, and the command that evaluates it."""
  from jaxcse.evaluation import sts_metrics

  metric = config.eval.metric
  first = summary["first_eval"]
  if first is not None and first["step"] == 0:
    before = summary.get("first_metric")
    if before is None:  # A summary from before first_metric was recorded.
      before = sts_metrics.SELECTION_METRICS[metric]({k: v for k, v in first.items() if k != "step"})
    # The metric the run selects on, so that the two lines compare one number.
    label = "STS-B dev Spearman" if metric == "stsb_dev" else f"{metric} x100"
    print(f"{label} before training: {before * 100:.2f}")
  if summary["best_metric"] is not None:
    print(f"best {metric} x100: {summary['best_metric'] * 100:.2f} at step {summary['best_step']}")
  if summary["best_step"] == 0 and summary["steps"] > 0:
    print(
      f"note: no trained step beat step 0 on {metric}: the best checkpoint, which evaluate, encode and export "
      "serve, is the starting model, untrained (--checkpoint latest serves the last step's)"
    )
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

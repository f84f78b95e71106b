"""The `rft` console command: one line per sub-command, each implemented in its own module."""

from cli import defaults

defaults.apply()  # before anything imports Prefect

import typer  # noqa: E402

from cli import compare, convert, import_trinity, retry, run, validate, watch  # noqa: E402
from cli import eval as eval_cli  # noqa: E402

app = typer.Typer(
    name="rft",
    help="Reinforcement fine-tuning of LLMs as a Prefect pipeline.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """Reinforcement fine-tuning of LLMs as a Prefect pipeline."""


app.command("validate")(validate.validate)
app.command("import-trinity")(import_trinity.import_trinity_command)
app.command("run")(run.run)
app.command("convert")(convert.convert)
app.command("eval")(eval_cli.eval_command)
app.command("watch")(watch.watch)
app.command("retry")(retry.retry)
app.command("compare")(compare.compare_command)

if __name__ == "__main__":
    app()

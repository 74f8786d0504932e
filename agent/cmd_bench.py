"""Commands of the `agent` CLI: bench (filled in by its issue)."""
import typer


def register(app: typer.Typer) -> None:
    pass

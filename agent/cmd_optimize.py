"""Commands of the `agent` CLI: optimize (filled in by its issue)."""
import typer


def register(app: typer.Typer) -> None:
    pass

"""Patch: guard a framework's unconditional imports of a package it only needs on some paths.

Seen for real (sglang 0.5.23 on the CPU testbed, 2026-12-01): its CPU engine serves a dense model
in plain torch, yet the server dies at start because modules it imports on every path do
`import torchvision` at the top (srt/multimodal/internvl_utils.py, srt/configs/deepseek_ocr.py:
image models only) and `if _is_cpu: from sgl_kernel import ...` (ten kernels/ and srt/ modules; the
package index has no CPU build of sgl_kernel, and the CUDA one needs libcuda). The names those
imports bind are used only inside functions of the image models / spec-decoding paths, so binding
them to None when the package is absent lets the rest start; a path that does need one fails there,
loudly, with a NoneType call rather than at import.

The patch is built from the run's source tree (ast finds the import statements; the edit is
diffed with difflib), for every such import of the one missing package the log named, so one
review covers the package instead of one launch per file.
"""
from __future__ import annotations

import ast
from pathlib import Path

from tools.patch import source_files

# framework -> package -> which imports to guard: "top" (module level) or "cpu" (inside a module-level
# `if/elif` whose test mentions cpu: the CPU-only kernel imports)
OPTIONAL = {"sglang": {"torchvision": "top", "sgl_kernel": "cpu"}}
WHY = {"torchvision": "image-model helpers import it at the top; text serving never calls them, and the "
                      "package index has no torchvision that loads beside a CPU torch",
       "sgl_kernel": "CPU-only kernel imports run at start; the package index has no CPU build of "
                     "sgl_kernel (its wheels are CUDA builds that need libcuda)"}
SKIP_DIRS = ("multimodal_gen", "test", "tests")  # not imported by the language-model server


def _root(st: ast.stmt) -> str:
    name = st.module if isinstance(st, ast.ImportFrom) else st.names[0].name
    return (name or "").split(".")[0] if not (isinstance(st, ast.ImportFrom) and st.level) else ""


def _sites(tree: ast.Module, package: str, where: str) -> list[ast.stmt]:
    out = []
    for node in tree.body:
        if where == "top" and isinstance(node, (ast.Import, ast.ImportFrom)) and _root(node) == package:
            out.append(node)
        n = node
        while where == "cpu" and isinstance(n, ast.If):
            if "cpu" in ast.unparse(n.test):
                out += [s for s in n.body if isinstance(s, (ast.Import, ast.ImportFrom)) and _root(s) == package]
            n = n.orelse[0] if len(n.orelse) == 1 and isinstance(n.orelse[0], ast.If) else None
    return out


def _bound(st: ast.stmt) -> list[str]:
    if isinstance(st, ast.Import):  # `import a.b` binds a; `import a.b as c` binds c
        return [a.asname or a.name.split(".")[0] for a in st.names]
    return [a.asname or a.name for a in st.names]


def guard_source(src: str, package: str, where: str) -> str | None:
    """The source with each such import wrapped in try/except ImportError (names -> None); None
    when the file has none."""
    sites = _sites(ast.parse(src), package, where)
    if not sites:
        return None
    lines = src.splitlines(True)
    for st in sorted(sites, key=lambda s: -s.lineno):
        ind = " " * st.col_offset
        stmt = "".join("    " + ln for ln in lines[st.lineno - 1:st.end_lineno])
        names = " = ".join(_bound(st))
        lines[st.lineno - 1:st.end_lineno] = [
            f"{ind}try:\n{stmt}{ind}except ImportError:  # optional: {package} is not installed\n"
            f"{ind}    {names} = None\n"]
    return "".join(lines)


def in_tree(tree: Path, file: str, package_name: str) -> str | None:
    """The failing file's path inside the tree (the log names the installed copy or this one)."""
    parts = Path(file).parts
    if package_name not in parts:
        return None
    i = len(parts) - 1 - parts[::-1].index(package_name)
    rel = Path(*parts[i + 1:]).as_posix() if i + 1 < len(parts) else ""
    return rel if rel and (Path(tree) / rel).is_file() else None


def guard_patch(tree: Path, framework: str, package: str, failing_file: str, unified):
    """(title, why, diff, files) for guarding `package` across the tree, or None when this is not a
    known optional package of the framework, or the failing file has no such import."""
    where = OPTIONAL.get(framework, {}).get(package)
    rel_fail = in_tree(tree, failing_file, framework) if where else None
    if rel_fail is None:
        return None
    diffs, files = [], []
    for path in source_files(Path(tree), "*.py"):
        rel = path.relative_to(tree)
        if any(p in SKIP_DIRS for p in rel.parts[:-1]):
            continue
        src = path.read_text(errors="replace")
        if package not in src:
            continue
        try:
            new = guard_source(src, package, where)
        except SyntaxError:
            continue
        if new is not None:
            diffs.append(unified(rel.as_posix(), src, new))
            files.append(rel.as_posix())
    if rel_fail not in files:
        return None
    title = f"guard {framework}'s optional {package} imports ({len(files)} modules, first {rel_fail})"
    why = f"the server died importing {package} from {rel_fail}: {WHY[package]}"
    return title, why, "".join(diffs), files

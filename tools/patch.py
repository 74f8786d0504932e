"""Patches on a framework source tree, through git (GitPython).

Rules: the tree is committed before the agent touches it; every agent patch is one commit carrying
an `Inferloop-Patch: <id>` trailer; only those commits are ever reverted (a revert carries
`Inferloop-Revert: <id>`); a diff is refused before anything runs when any path it names is
absolute, has a `..` part, leads out of the tree through a symlink, or creates a symlink.
"""
from __future__ import annotations

import os
import re
import shutil
import subprocess
from fnmatch import fnmatch
from pathlib import Path, PurePosixPath

import git

PATCH_TRAILER = "Inferloop-Patch"
REVERT_TRAILER = "Inferloop-Revert"
_ENV = {"GIT_AUTHOR_NAME": "inferloop", "GIT_AUTHOR_EMAIL": "inferloop@localhost",
        "GIT_COMMITTER_NAME": "inferloop", "GIT_COMMITTER_EMAIL": "inferloop@localhost"}
_HEADER = re.compile(r"^(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.+?)\s*$")
_GITLINE = re.compile(r"^diff --git (\S+) (\S+)\s*$")


class PatchRefused(ValueError):
    """The diff may not be applied (it escapes the tree, or does not apply); the message says why."""


def _strip(p: str) -> str | None:
    p = p.split("\t")[0].strip()
    if p == "/dev/null":
        return None
    if p.startswith(("a/", "b/")):
        p = p[2:]
    return p


def diff_paths(diff: str) -> list[str]:
    """Every path a unified / git diff names, as written (a/ and b/ prefixes removed)."""
    out: list[str] = []
    for line in diff.splitlines():
        m = _GITLINE.match(line)
        names = list(m.groups()) if m else []
        m2 = _HEADER.match(line)
        if m2:
            names.append(m2.group(1))
        for n in names:
            s = _strip(n)
            if s is not None and s not in out:
                out.append(s)
    return out


def check_diff(diff: str, tree: Path) -> list[str]:
    """The paths the diff touches, all proven to stay inside `tree`; else PatchRefused."""
    if not diff.strip():
        raise PatchRefused("empty diff")
    if re.search(r"^(new file mode|new mode|old mode) 120000", diff, re.M):
        raise PatchRefused("the diff creates a symlink; patches may not create links")
    paths = diff_paths(diff)
    if not paths:
        raise PatchRefused("the diff names no file")
    root = Path(tree).resolve()
    for p in paths:
        if p.startswith("/") or PurePosixPath(p).is_absolute() or re.match(r"^[A-Za-z]:[\\/]", p):
            raise PatchRefused(f"absolute path {p!r} in the diff; paths must be relative to the source tree")
        if ".." in PurePosixPath(p).parts or "\\" in p:
            raise PatchRefused(f"path {p!r} in the diff leaves the source tree ('..' or backslash)")
        if p.startswith(".git/") or p == ".git":
            raise PatchRefused(f"path {p!r} would change git's own data")
        real = (root / p).resolve()
        if real != root and root not in real.parents:
            raise PatchRefused(f"path {p!r} resolves to {str(real)!r}, outside the source tree (symlink)")
    return paths


def source_files(tree: Path, pattern: str = "*") -> list[Path]:
    """The tree's files whose name matches `pattern`, sorted; git's own data is left out (it is never
    source, and a git may be rewriting .git/objects while this walks), symlinked folders are not
    followed."""
    out = []
    for d, dirs, files in os.walk(tree):
        dirs[:] = [x for x in dirs if x != ".git"]
        out += [Path(d) / f for f in files if fnmatch(f, pattern)]
    return sorted(out)


JOURNAL = "inferloop-operation"  # in .git while a patch or revert is between its first write and its commit


def open_tree(tree: Path) -> git.Repo:
    """The tree as a git repo, with everything in it committed (so the agent's changes are
    always separable from what was there), recovered from an agent killed mid-operation.

    apply and revert write a journal into .git before they touch the tree and remove it after the
    commit. A journal found here means that operation was cut short by a kill (git apply done,
    commit not): its changes are thrown away back to the last commit, instead of being committed
    as if they were the pristine source; the caller then redoes the operation. Any other dirt is
    someone's own edit and is committed first, as always. A git killed while holding index.lock
    leaves the lock behind; one agent works a run (agent/run_lock.py), so no git of ours runs
    now and the lock is stale. That holds for a `git init` killed half-way too: it leaves a .git
    that is not yet a repo, holding config.lock, and re-running init over it would fail on it."""
    tree = Path(tree)
    try:
        repo = git.Repo(tree)
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        (tree / ".git" / "config.lock").unlink(missing_ok=True)
        repo = git.Repo.init(tree)
    gitdir = Path(repo.git_dir)
    conf = gitdir / "config"
    if "auto = 0" not in (conf.read_text(errors="replace") if conf.is_file() else ""):
        # No automatic gc: after a commit over a big tree (sglang: thousands of files) git would pack
        # in a detached background process that rewrites .git/objects while the agent reads the tree
        # and that can outlive the run.
        (gitdir / "config.lock").unlink(missing_ok=True)
        repo.git.config("gc.auto", "0")
    for lock in [gitdir / "index.lock", gitdir / "HEAD.lock", gitdir / "config.lock",
                 *gitdir.glob("refs/heads/*.lock")]:
        lock.unlink(missing_ok=True)
    if (gitdir / JOURNAL).is_file() and repo.head.is_valid():
        repo.git.reset("--hard", "-q", "HEAD")
        repo.git.clean("-fdq")
        for state in ("REVERT_HEAD", "CHERRY_PICK_HEAD", "MERGE_MSG"):
            (gitdir / state).unlink(missing_ok=True)
        shutil.rmtree(gitdir / "sequencer", ignore_errors=True)
    (gitdir / JOURNAL).unlink(missing_ok=True)
    if repo.is_dirty(untracked_files=True) or not repo.head.is_valid():
        repo.git.add("-A")
        with repo.git.custom_environment(**_ENV):
            repo.git.commit("--allow-empty", "-m", "inferloop: snapshot before the agent patches this tree")
    return repo


class _Journal:
    """`with _Journal(repo, what):` the tree may be half-changed inside; open_tree undoes that."""

    def __init__(self, repo: git.Repo, what: str):
        self.path = Path(repo.git_dir) / JOURNAL
        self.what = what

    def __enter__(self):
        self.path.write_text(self.what + "\n")
        return self

    def __exit__(self, exc_type, *rest):
        if exc_type is None:
            self.path.unlink(missing_ok=True)  # committed: nothing to undo


def applied(tree: Path) -> dict[str, str]:
    """Agent patches in effect now: patch id -> commit sha, oldest first."""
    repo = open_tree(tree)
    state: dict[str, str] = {}
    for c in reversed(list(repo.iter_commits())):
        msg = c.message
        for m in re.finditer(rf"^{PATCH_TRAILER}: (\S+)$", msg, re.M):
            state[m.group(1)] = c.hexsha
        for m in re.finditer(rf"^{REVERT_TRAILER}: (\S+)$", msg, re.M):
            state.pop(m.group(1), None)
    return state


def apply(tree: Path, diff: str, patch_id: str, title: str) -> str:
    """Apply and commit one patch; returns the commit sha. Idempotent on the patch id."""
    repo = open_tree(tree)
    now = applied(tree)
    if patch_id in now:
        return now[patch_id]
    paths = check_diff(diff, tree)
    try:
        _git_apply(repo, diff, check=True)
    except subprocess.CalledProcessError as e:
        raise PatchRefused(f"the diff does not apply to this tree: {e.stderr.strip()}") from None
    with _Journal(repo, f"apply {patch_id}"):
        _git_apply(repo, diff, check=False)
        repo.git.add("-A", "--", *paths)
        with repo.git.custom_environment(**_ENV):
            repo.git.commit("-m", f"inferloop: {title}\n\n{PATCH_TRAILER}: {patch_id}")
    return repo.head.commit.hexsha


def revert(tree: Path, patch_id: str) -> str | None:
    """Revert the agent's own commit for this patch (nothing else is ever reverted)."""
    repo = open_tree(tree)
    sha = applied(tree).get(patch_id)
    if sha is None:
        return None
    if f"{PATCH_TRAILER}: {patch_id}" not in repo.commit(sha).message:
        raise PatchRefused(f"commit {sha} is not the agent's own; refusing to revert it")
    with _Journal(repo, f"revert {patch_id}"):
        repo.git.revert("--no-commit", sha)
        with repo.git.custom_environment(**_ENV):
            repo.git.commit("-m", f"inferloop: revert patch {patch_id}\n\n{REVERT_TRAILER}: {patch_id}")
    return repo.head.commit.hexsha


def sync(tree: Path, wanted: list[tuple[str, str, str]]) -> None:
    """Make the agent patches in effect exactly `wanted` = [(id, diff, title)]: revert the others
    (newest first), then apply what is missing, in order."""
    want_ids = [w[0] for w in wanted]
    now = applied(tree)
    if list(now) == want_ids:  # the common case (every launch syncs): nothing to do, no more git calls
        return
    for pid in reversed(list(now)):
        if pid not in want_ids:
            revert(tree, pid)
    for pid, diff, title in wanted:
        apply(tree, diff, pid, title)


def _git_apply(repo: git.Repo, diff: str, *, check: bool) -> None:
    args = ["git", "apply", "--whitespace=nowarn"] + (["--check"] if check else [])
    subprocess.run(args, cwd=repo.working_tree_dir, input=diff, text=True, check=True,
                   capture_output=True)

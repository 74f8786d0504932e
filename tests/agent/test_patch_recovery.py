"""Issue 13 item 4: a kill during a patch neither wedges nor corrupts the tree. The states a kill
leaves are made here with real git: a stale index.lock, a diff applied but not committed, a
revert started but not committed. The next sync ends exactly where an uninterrupted one would."""
import subprocess

import git

from tests.agent.test_patch import mk_tree, udiff
from tools import patch as P


def _snapshots(t):
    return sum(c.message.startswith("inferloop: snapshot") for c in git.Repo(t).iter_commits())


def test_stale_index_lock_from_a_killed_git_is_cleared(tmp_path):
    t = mk_tree(tmp_path)
    d = udiff(t, "src/a.py", "x = 1\ny = 3\n")
    P.open_tree(t)
    (t / ".git" / "index.lock").write_text("")  # git was killed holding it
    P.sync(t, [("p1", d, "set y")])
    assert list(P.applied(t)) == ["p1"] and (t / "src" / "a.py").read_text() == "x = 1\ny = 3\n"


def test_killed_between_git_apply_and_commit(tmp_path):
    t = mk_tree(tmp_path)
    d = udiff(t, "src/a.py", "x = 1\ny = 3\n")
    P.open_tree(t)
    (t / ".git" / P.JOURNAL).write_text("apply p1\n")  # what apply() writes before it touches the tree
    subprocess.run(["git", "apply"], cwd=t, input=d, text=True, check=True)  # ... and then kill -9
    (t / "src" / "half.py").write_text("partial")  # a new file the cut-short patch had created
    P.sync(t, [("p1", d, "set y")])
    assert list(P.applied(t)) == ["p1"]
    assert (t / "src" / "a.py").read_text() == "x = 1\ny = 3\n" and not (t / "src" / "half.py").exists()
    assert _snapshots(t) == 1  # the half-applied diff was not committed as the pristine source
    P.sync(t, [])
    assert (t / "src" / "a.py").read_text() == "x = 1\ny = 2\n"  # and reverting gives the real original


def test_killed_during_a_revert(tmp_path):
    t = mk_tree(tmp_path)
    d = udiff(t, "src/a.py", "x = 1\ny = 3\n")
    P.sync(t, [("p1", d, "set y")])
    repo, sha = git.Repo(t), P.applied(t)["p1"]
    (t / ".git" / P.JOURNAL).write_text("revert p1\n")
    repo.git.revert("--no-commit", sha)  # ... and then kill -9
    P.sync(t, [("p1", d, "set y")])  # resumed: the patch is still wanted
    assert list(P.applied(t)) == ["p1"] and (t / "src" / "a.py").read_text() == "x = 1\ny = 3\n"
    assert not repo.is_dirty(untracked_files=True)


def test_a_user_tree_with_local_changes_is_still_snapshotted_first(tmp_path):
    t = mk_tree(tmp_path)
    git.Repo.init(t)
    (t / "src" / "mine.py").write_text("user work")
    P.open_tree(t)
    assert _snapshots(t) == 1 and (t / "src" / "mine.py").read_text() == "user work"


def test_killed_during_git_init(tmp_path):
    """From-scratch CI met this: the kill landed inside the first `git init` of the run's source
    tree, and the resume failed on the config.lock it left ('could not lock config file')."""
    for keep in ([], ["HEAD", "objects", "refs"]):  # killed before, or after, git wrote HEAD
        t = mk_tree(tmp_path / str(len(keep)))
        subprocess.run(["git", "init", "-q"], cwd=t, check=True)
        for p in (t / ".git").iterdir():
            if p.name not in keep:
                subprocess.run(["rm", "-rf", str(p)], check=True)
        (t / ".git" / "config.lock").write_text("")
        d = udiff(t, "src/a.py", "x = 1\ny = 3\n")
        P.sync(t, [("p1", d, "set y")])
        assert list(P.applied(t)) == ["p1"] and _snapshots(t) == 1
        P.sync(t, [])
        assert (t / "src" / "a.py").read_text() == "x = 1\ny = 2\n"


def test_no_background_gc_and_no_walk_through_git_data(tmp_path):
    """From-scratch CI met this on the real sglang tree: a commit over thousands of files set off
    git's detached auto-gc, which deleted .git/objects/b5 while the import-guard fix walked the tree
    (FileNotFoundError). Our trees never auto-gc, and tree walks leave git's data alone."""
    t = mk_tree(tmp_path)
    P.open_tree(t)
    assert git.Repo(t).git.config("gc.auto") == "0"
    (t / ".git" / "hooks" / "evil.py").write_text("x = 1\n")
    (t / "src" / "b.py").write_text("y = 1\n")
    assert [p.relative_to(t).as_posix() for p in P.source_files(t, "*.py")] == ["src/a.py", "src/b.py"]

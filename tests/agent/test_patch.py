"""tools/patch.py on real git in tmp_path: commit first, apply/revert only our own commits,
refuse diffs that escape the tree."""
import difflib
import os

import git
import pytest

from tools import patch as P


def mk_tree(tmp_path):
    t = tmp_path / "tree"
    (t / "src").mkdir(parents=True)
    (t / "src" / "a.py").write_text("x = 1\ny = 2\n")
    return t


def udiff(tree, rel, new):
    old = (tree / rel).read_text()
    return "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"))


def test_apply_revert_sync_roundtrip(tmp_path):
    t = mk_tree(tmp_path)
    d = udiff(t, "src/a.py", "x = 1\ny = 3\n")
    sha = P.apply(t, d, "p1", "set y")
    assert (t / "src" / "a.py").read_text() == "x = 1\ny = 3\n"
    assert P.applied(t) == {"p1": sha}
    assert P.apply(t, d, "p1", "set y") == sha  # idempotent
    repo = git.Repo(t)
    assert repo.commit("HEAD~1").message.startswith("inferloop: snapshot")  # committed before touching
    P.revert(t, "p1")
    assert (t / "src" / "a.py").read_text() == "x = 1\ny = 2\n" and P.applied(t) == {}
    P.sync(t, [("p1", d, "set y")])
    assert P.applied(t).keys() == {"p1"}
    P.sync(t, [])
    assert P.applied(t) == {} and (t / "src" / "a.py").read_text() == "x = 1\ny = 2\n"


def test_user_edits_are_committed_and_never_reverted(tmp_path):
    t = mk_tree(tmp_path)
    P.open_tree(t)
    (t / "src" / "a.py").write_text("x = 10\ny = 2\n")  # the user's own change
    d = udiff(t, "src/a.py", "x = 10\ny = 3\n")
    P.apply(t, d, "p1", "set y")
    P.revert(t, "p1")
    assert (t / "src" / "a.py").read_text() == "x = 10\ny = 2\n"
    assert P.revert(t, "nope") is None


@pytest.mark.parametrize("diff,words", [
    ("--- a//etc/passwd\n+++ b//etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "absolute"),
    ("--- /etc/passwd\n+++ /etc/passwd\n@@ -1 +1 @@\n-a\n+b\n", "absolute"),
    ("--- a/../x\n+++ b/../x\n@@ -1 +1 @@\n-a\n+b\n", "leaves the source tree"),
    ("--- a/src/../../x\n+++ b/src/../../x\n@@ -1 +1 @@\n-a\n+b\n", "leaves the source tree"),
    ("diff --git a/l b/l\nnew file mode 120000\n--- /dev/null\n+++ b/l\n@@ -0,0 +1 @@\n+/etc\n", "symlink"),
    ("--- a/.git/config\n+++ b/.git/config\n@@ -1 +1 @@\n-a\n+b\n", "git's own data"),
    ("", "empty"),
])
def test_refuses_escaping_diffs(tmp_path, diff, words):
    t = mk_tree(tmp_path)
    with pytest.raises(P.PatchRefused, match=words):
        P.apply(t, diff, "bad", "bad")
    assert P.applied(t) == {}


def test_refuses_paths_through_a_symlink_out(tmp_path):
    t = mk_tree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f.txt").write_text("a\n")
    os.symlink(outside, t / "link")
    d = "--- a/link/f.txt\n+++ b/link/f.txt\n@@ -1 +1 @@\n-a\n+b\n"
    with pytest.raises(P.PatchRefused, match="outside the source tree"):
        P.apply(t, d, "sym", "sym")
    assert (outside / "f.txt").read_text() == "a\n"


def test_a_diff_that_does_not_apply_is_refused(tmp_path):
    t = mk_tree(tmp_path)
    d = "--- a/src/a.py\n+++ b/src/a.py\n@@ -1,2 +1,2 @@\n x = 5\n-y = 2\n+y = 3\n"
    with pytest.raises(P.PatchRefused, match="does not apply"):
        P.apply(t, d, "p", "p")


def test_never_reverts_a_foreign_commit(tmp_path):
    t = mk_tree(tmp_path)
    repo = P.open_tree(t)
    # Someone else writes a commit that merely mentions a trailer-like id in its body.
    (t / "src" / "a.py").write_text("x = 2\ny = 2\n")
    repo.git.add("-A")
    repo.git.commit("-m", "upstream change", "--author", "Dev <d@x>", env={"GIT_COMMITTER_NAME": "d", "GIT_COMMITTER_EMAIL": "d@x"})
    assert P.applied(t) == {}
    assert P.revert(t, "upstream") is None
    assert (t / "src" / "a.py").read_text() == "x = 2\ny = 2\n"

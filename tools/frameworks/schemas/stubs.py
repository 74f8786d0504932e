"""Import a framework's argument module without its heavy dependencies.

The frameworks' parsers need no GPU, but the modules that define them import torch, triton,
transformers and friends at the top. `stubbed_imports(root, real=...)` puts the unpacked wheel
(or source checkout) first on sys.path and answers every import that is neither the standard
library, the framework itself, nor a package named in `real` with a `Stub` module: any attribute,
call, subscript or base-class use of a stub yields another stub, so module-level code such as
`torch.float16` or `class X(nn.Module)` runs. A framework submodule whose own import fails
(a compiled extension, a platform probe) is replaced by a stub too, and named in `.stubbed`
so the generated schema can say what it could not see.
"""
from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from contextlib import contextmanager
from pathlib import Path


# Dependencies the frameworks' argument modules import at the top but never need to build a
# parser (GPU kernels, tensor libraries, servers, tokenizers).
HEAVY = frozenset("""torch torchvision torchaudio torchcodec torchada triton transformers numpy
PIL zmq psutil requests orjson pybase64 starlette fastapi uvicorn huggingface_hub safetensors
sentencepiece tokenizers aiohttp openai xgrammar flashinfer flash_attn einops tqdm IPython openai_harmony
setproctitle prometheus_client cloudpickle dill msgpack partial_json_parser mlx aiter cbor2 blake3
cachetools gguf outlines lark llguidance compressed_tensors depyf ray sgl_kernel vllm_flash_attn
datasets scipy pandas numba cv2 av soundfile librosa tiktoken mistral_common diskcache
setuptools_scm python_multipart watchfiles uvloop websockets pyzmq nvtx pynvml amdsmi
deep_gemm deep_ep mooncake nixl lmcache opentelemetry sentry_sdk modelscope peft
interegular jinja2 regex anthropic grpc google protobuf""".split())


class _StubMeta(type):
    """Metaclass of the stand-in base classes: class-level lookups and iteration answer like a
    stub, and class keywords (`class S(msgspec.Struct, kw_only=True)`) are accepted."""

    def __new__(mcs, name, bases, ns, **kwargs):
        return super().__new__(mcs, name, bases, ns)

    def __init__(cls, name, bases, ns, **kwargs):
        super().__init__(name, bases, ns)

    def __getattr__(cls, attr):
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return Stub(f"{cls.__name__}.{attr}")

    def __iter__(cls):
        return iter(())

    def __getitem__(cls, key):  # `LRUCache[str, int]` on a stubbed generic
        return cls

    def __get_pydantic_core_schema__(cls, source, handler):
        return _any_schema()


def _any_schema():
    """pydantic models with a stubbed field type validate anything (the parser never builds them)."""
    from pydantic_core import core_schema
    return core_schema.any_schema()


class Stub:
    """A value that answers everything; stands in for objects of modules that were not loaded."""

    def __init__(self, name: str = "stub"):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> "Stub":
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return Stub(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        # Used as a decorator (`@torch.compile`, `@lru_cache(...)`): hand the function back.
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], Stub):
            return args[0]
        return Stub(f"{self._name}()")

    def __getitem__(self, key) -> "Stub":
        return Stub(f"{self._name}[]")

    def __mro_entries__(self, bases):  # `class X(torch.nn.Module)`: a plain base instead
        return (_StubMeta(self._name.rsplit(".", 1)[-1], (), {}),)

    def __iter__(self):
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __len__(self) -> int:
        return 0

    def __contains__(self, item) -> bool:
        return False

    def __or__(self, other):  # `torch.dtype | None` in annotations evaluated at import
        return self

    __ror__ = __or__

    def __add__(self, other):  # `STUB_LIST + ["all"]`: the known part survives
        return other

    __radd__ = __add__

    def __eq__(self, other) -> bool:
        return isinstance(other, Stub) and other._name == self._name

    def __hash__(self) -> int:
        return hash(self._name)

    def __repr__(self) -> str:
        return f"<stub {self._name}>"

    def __get_pydantic_core_schema__(self, source, handler):
        return _any_schema()


class StubModule(types.ModuleType):
    def __init__(self, name: str):
        super().__init__(name)
        self.__path__ = []  # a package, so `import torch.nn.functional` finds children here too
        self.__file__ = f"<stub {name}>"

    def __getattr__(self, attr: str):
        if attr == "__version__":  # version probes (`torch.__version__ >= ...`) get a plain string
            return "0.0.0"
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return Stub(f"{self.__name__}.{attr}")

    def __call__(self, *args, **kwargs):  # `from pkg import f` that resolved to a stub submodule
        return Stub(f"{self.__name__}()")

    def __mro_entries__(self, bases):
        return (_StubMeta(self.__name__.rsplit(".", 1)[-1], (), {}),)

    def __iter__(self):
        return iter(())

    def __get_pydantic_core_schema__(self, source, handler):
        return _any_schema()


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return StubModule(spec.name)

    def exec_module(self, module) -> None:
        pass


class _GuardedLoader(importlib.abc.Loader):
    """Runs a framework submodule for real; if it raises, the module becomes a stub."""

    def __init__(self, inner, finder: "StubFinder"):
        self.inner, self.finder = inner, finder

    def create_module(self, spec):
        return self.inner.create_module(spec)

    def exec_module(self, module) -> None:
        try:
            self.inner.exec_module(module)
        except Exception as e:  # noqa: BLE001 - any failure: see what the stub lets through
            self.finder.stubbed[module.__name__] = f"{type(e).__name__}: {e}"[:200]
            stub = StubModule(module.__name__)
            for k, v in vars(module).items():  # keep what was defined before the failure
                if not k.startswith("__"):
                    setattr(stub, k, v)
            sys.modules[module.__name__] = stub


class StubFinder(importlib.abc.MetaPathFinder):
    def __init__(self, own: set[str], stub: set[str]):
        self.own, self.stub = own, stub
        self.stubbed: dict[str, str] = {}  # module -> why

    def find_spec(self, fullname, path, target=None):
        top = fullname.split(".")[0]
        if top in sys.stdlib_module_names:
            return None
        if top in self.own:
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.origin is None and spec.submodule_search_locations:
                return spec  # a namespace package (a folder without __init__.py)
            if spec is None or spec.loader is None or not spec.origin or not spec.origin.endswith(".py"):
                self.stubbed.setdefault(fullname, "not importable from the source (compiled or absent)")
                return importlib.util.spec_from_loader(fullname, _StubLoader(), is_package=True)
            spec.loader = _GuardedLoader(spec.loader, self)
            return spec
        if top in self.stub:
            self.stubbed.setdefault(top, "dependency (stubbed)")
            return importlib.util.spec_from_loader(fullname, _StubLoader(), is_package=True)
        # Anything else imports for real or not at all: a stub here would make availability
        # probes (`find_spec("torch_npu")`) answer yes and send the module down a platform branch.
        return None


@contextmanager
def stubbed_imports(roots: list[Path], own: set[str], stub: set[str] = HEAVY):
    """sys.path gets `roots` first; imports of `own` packages run from them, `stub` packages are
    stubs, everything else imports normally (from the roots or this interpreter) or fails as it
    would. Everything imported meanwhile is dropped from sys.modules afterwards."""
    before = set(sys.modules)
    finder = StubFinder(set(own), set(stub))
    paths = [str(r) for r in roots]
    sys.path[:0] = paths
    sys.meta_path.insert(0, finder)
    try:
        yield finder
    finally:
        sys.meta_path.remove(finder)
        for p in paths:
            sys.path.remove(p)
        for name in set(sys.modules) - before:
            del sys.modules[name]

"""Typed method descriptors (``acp_fast.protocol.methods`` and the generated
``methods_v1`` / ``methods_v2``).

The descriptors must agree with the wire-surface tables (one descriptor per method and
kind, same type names), follow the documented naming rule, stay cheap to import (the
schema types only under ``TYPE_CHECKING``), and carry their params / result types to a
type checker: a ``mypy --strict`` run over a small example accepts right handlers and
rejects wrong ones, through a stand-in ``register`` and the builder overloads the
descriptors are meant for.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from acp_fast.protocol import methods_v1, methods_v2
from acp_fast.protocol.methods import Method, NotificationMethod, RequestMethod
from acp_fast.protocol.surface import WireSurface

REPO = Path(__file__).resolve().parent.parent
MODULES = {1: methods_v1, 2: methods_v2}


def _walk(module: ModuleType) -> dict[str, Method[Any, Any]]:
    """Every descriptor reachable as ``module.name`` or ``module.namespace.name``."""
    found: dict[str, Method[Any, Any]] = {}
    for name, value in vars(module).items():
        if isinstance(value, Method):
            found[name] = value
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr, member in vars(value).items():
                if isinstance(member, Method):
                    found[f"{name}.{attr}"] = member
    return found


def _expected_path(name: str, kind: str, both_kinds: bool) -> str:
    """The documented naming rule, written out independently of the generator."""
    path = "protocol." + name[2:] if name.startswith("$/") else name.replace("/", ".", 1)
    path = re.sub(r"[^0-9A-Za-z_.]", "_", path)
    if kind == "notification" and both_kinds:
        path += "_notification"
    return path


# ---------------------------------------------------------------------------
# Agreement with the wire surface
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2])
def test_every_descriptor_matches_the_surface(version: int) -> None:
    surface = WireSurface.for_version(version)
    module = MODULES[version]
    assert module.VERSION == version
    for method in module.ALL:
        info = surface.method_info(method.name, method.kind)
        assert info is not None, method
        assert (method.name, method.kind, method.version) == (info.name, info.kind, version)
        assert (method.params_type, method.result_type) == (info.params_type, info.result_type)
        expected_class = RequestMethod if method.kind == "request" else NotificationMethod
        assert type(method) is expected_class, method


@pytest.mark.parametrize("version", [1, 2])
def test_every_surface_method_has_one_descriptor(version: int) -> None:
    surface = WireSurface.for_version(version)
    wanted = {
        (name, kind)
        for name in surface.methods
        for kind in ("request", "notification")
        if surface.method_info(name, kind) is not None
    }
    have = [(m.name, m.kind) for m in MODULES[version].ALL]
    assert len(have) == len(set(have))
    assert set(have) == wanted


@pytest.mark.parametrize("version", [1, 2])
def test_names_follow_the_documented_rule(version: int) -> None:
    module = MODULES[version]
    reachable = _walk(module)
    assert sorted(reachable.values(), key=repr) == sorted(module.ALL, key=repr)
    kinds: dict[str, set[str]] = {}
    for method in module.ALL:
        kinds.setdefault(method.name, set()).add(method.kind)
    for path, method in reachable.items():
        both = len(kinds[method.name]) == 2
        assert path == _expected_path(method.name, method.kind, both), (path, method)
    top_level = {p.split(".")[0] for p in reachable}
    assert set(module.__all__) == top_level | {"ALL", "VERSION"}


def test_examples_of_the_naming_rule() -> None:
    m = methods_v2
    assert m.initialize.name == "initialize"
    assert m.session.prompt.name == "session/prompt"
    assert m.session.set_config_option.name == "session/set_config_option"
    assert m.protocol.cancel_request.name == "$/cancel_request"
    assert (m.mcp.message.kind, m.mcp.message_notification.kind) == ("request", "notification")
    assert m.mcp.message.name == m.mcp.message_notification.name == "mcp/message"
    assert methods_v1.fs.read_text_file.name == "fs/read_text_file"
    assert methods_v1.authenticate.result_type == "AuthenticateResponse"
    assert not hasattr(methods_v2, "fs")  # v2 has no fs/* methods


@pytest.mark.parametrize("version", [1, 2])
def test_type_names_exist_in_the_versions_types_module(version: int) -> None:
    types = importlib.import_module(f"acp_fast.protocol.types_v{version}")
    for method in MODULES[version].ALL:
        for name in (method.params_type, method.result_type):
            if name is not None:  # a TypedDict or an alias (dict[str, Any], Any)
                assert hasattr(types, name), (method, name)


# ---------------------------------------------------------------------------
# Runtime behaviour of the descriptor classes
# ---------------------------------------------------------------------------


def test_descriptor_runtime_surface() -> None:
    prompt = methods_v2.session.prompt
    assert str(prompt) == "session/prompt"
    assert repr(prompt) == "<request 'session/prompt' v2: PromptRequest -> PromptResponse>"
    assert repr(methods_v2.session.cancel) == (
        "<notification 'session/cancel' v2: CancelSessionNotification>"
    )
    same: RequestMethod[Any, Any] = RequestMethod("session/prompt", 2, "PromptRequest", "PromptResponse")
    assert same == prompt and hash(same) == hash(prompt)
    assert Method("session/prompt", "request", 2, "X", "Y") == prompt  # by name, kind, version
    assert methods_v1.session.prompt != prompt  # another version
    assert methods_v2.mcp.message != methods_v2.mcp.message_notification  # another kind
    assert prompt != "session/prompt"
    assert len({*methods_v2.ALL, *methods_v1.ALL}) == len(methods_v2.ALL) + len(methods_v1.ALL)
    for clone in (copy.copy(prompt), copy.deepcopy(prompt), pickle.loads(pickle.dumps(prompt))):
        assert clone == prompt and type(clone) is RequestMethod
        assert clone.result_type == "PromptResponse"
    cancel = pickle.loads(pickle.dumps(methods_v2.session.cancel))
    assert type(cancel) is NotificationMethod and cancel.result_type is None


def test_descriptors_are_immutable() -> None:
    prompt = methods_v2.session.prompt
    with pytest.raises(AttributeError):
        prompt.name = "session/other"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del prompt.version
    with pytest.raises(AttributeError):
        prompt.extra = 1  # type: ignore[attr-defined]
    assert prompt.name == "session/prompt"


def test_descriptor_rejects_inconsistent_kind() -> None:
    with pytest.raises(ValueError, match="kind"):
        Method("x/y", "call", 2, "P", "R")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="result type"):
        Method("x/y", "notification", 2, "P", "R")
    with pytest.raises(ValueError, match="result type"):
        Method("x/y", "request", 2, "P", None)


# ---------------------------------------------------------------------------
# Import cost
# ---------------------------------------------------------------------------


def test_method_modules_do_not_import_the_schema_types() -> None:
    code = (
        "import sys\n"
        "import acp_fast\n"
        "assert not [m for m in sys.modules if m.startswith('acp_fast.protocol.methods')]\n"
        "from acp_fast.protocol import methods_v1, methods_v2\n"
        "heavy = [m for m in ('acp_fast.protocol.types_v1', 'acp_fast.protocol.types_v2',"
        " 'acp_fast.roles', 'asyncio') if m in sys.modules]\n"
        "assert not heavy, heavy\n"
        "assert methods_v2.session.prompt.result_type == 'PromptResponse'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


# ---------------------------------------------------------------------------
# Static typing: mypy --strict accepts right handlers and rejects wrong ones
# ---------------------------------------------------------------------------

# Lines marked "# BAD" must each get a mypy error; no other line may.
TYPED_EXAMPLE = '''\
from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, Union, overload

from acp_fast.protocol import methods_v1
from acp_fast.protocol import methods_v2 as methods
from acp_fast.protocol.methods import Method, NotificationMethod, RequestMethod
from acp_fast.protocol.types_v2 import (
    CancelSessionNotification,
    NewSessionRequest,
    NewSessionResponse,
    PromptRequest,
    PromptResponse,
)

P = TypeVar("P")
R = TypeVar("R")


def register(m: Method[P, R], fn: Callable[[P], R]) -> None: ...


def prompt(params: PromptRequest) -> PromptResponse:
    return {"messageId": params["sessionId"]}


def new_session_result(params: PromptRequest) -> NewSessionResponse:
    return {"sessionId": "s"}


def new_session_params(params: NewSessionRequest) -> PromptResponse:
    return {"messageId": "m"}


register(methods.session.prompt, prompt)
register(methods.session.prompt, new_session_result)  # BAD
register(methods.session.prompt, new_session_params)  # BAD
register(methods_v1.session.prompt, prompt)  # BAD
methods.session.prompt = methods.session.prompt  # BAD (Final)
methods.session.prompt.name = "session/other"  # BAD

# The builder overloads recommended for on_request / on_notification.


class Context: ...


_B = TypeVar("_B", bound="Builder")
_F = TypeVar("_F", bound=Callable[..., Any])
RequestHandler = Callable[[P, Context], Union[R, Awaitable[R]]]
NotificationHandler = Callable[[P, Context], Union[None, Awaitable[None]]]


class Builder:
    @overload
    def on_request(self: _B, method: RequestMethod[P, R], fn: RequestHandler[P, R]) -> _B: ...
    @overload
    def on_request(
        self, method: RequestMethod[P, R], fn: None = None
    ) -> Callable[[RequestHandler[P, R]], RequestHandler[P, R]]: ...
    @overload
    def on_request(self: _B, method: str, fn: Callable[[Any, Context], Any]) -> _B: ...
    @overload
    def on_request(self, method: str, fn: None = None) -> Callable[[_F], _F]: ...
    def on_request(self, method: RequestMethod[Any, Any] | str, fn: Any = None) -> Any:
        return self

    @overload
    def on_notification(
        self: _B, method: NotificationMethod[P], fn: NotificationHandler[P]
    ) -> _B: ...
    @overload
    def on_notification(
        self, method: NotificationMethod[P], fn: None = None
    ) -> Callable[[NotificationHandler[P]], NotificationHandler[P]]: ...
    @overload
    def on_notification(self: _B, method: str, fn: Callable[[Any, Context], Any]) -> _B: ...
    @overload
    def on_notification(self, method: str, fn: None = None) -> Callable[[_F], _F]: ...
    def on_notification(
        self, method: NotificationMethod[Any] | str, fn: Any = None
    ) -> Any:
        return self


agent = Builder()


async def async_prompt(params: PromptRequest, cx: Context) -> PromptResponse:
    return {"messageId": "m"}


async def async_wrong(params: PromptRequest, cx: Context) -> NewSessionResponse:
    return {"sessionId": "s"}


def on_cancel(params: CancelSessionNotification, cx: Context) -> None:
    return None


agent.on_request(methods.session.prompt, async_prompt).on_request("_x/y", lambda p, cx: p)
agent.on_request(methods.session.prompt, lambda p, cx: {"messageId": p["sessionId"]})
agent.on_request(methods.session.prompt, lambda p, cx: {"messageId": p["nope"]})  # BAD
agent.on_request(methods.session.prompt, lambda p, cx: {"sessionId": "s"})  # BAD
agent.on_request(methods.session.prompt, lambda p, cx: p)  # BAD
agent.on_request(methods.session.prompt, async_wrong)  # BAD
agent.on_request(methods.session.cancel, on_cancel)  # BAD
agent.on_notification(methods.session.cancel, on_cancel)
agent.on_notification(methods.session.prompt, async_prompt)  # BAD
agent.on_notification("session/cancel", on_cancel).on_notification(methods.session.cancel)


@agent.on_request(methods.session.prompt)
async def decorated(params: PromptRequest, cx: Context) -> PromptResponse:
    return {"messageId": "m"}


@agent.on_request(methods.session.prompt)  # BAD
def decorated_wrong(params: PromptRequest, cx: Context) -> NewSessionResponse:
    return {"sessionId": "s"}


@agent.on_request("session/prompt")
def by_name(params: Any, cx: Context) -> Any:
    return {}
'''


def test_mypy_accepts_right_handlers_and_rejects_wrong_ones(tmp_path: Path) -> None:
    pytest.importorskip("mypy.api", reason="mypy is not installed (pip install -e '.[test]')")
    source = tmp_path / "typed_example.py"
    source.write_text(TYPED_EXAMPLE)
    bad = {n for n, line in enumerate(TYPED_EXAMPLE.splitlines(), 1) if "# BAD" in line}
    # MYPYPATH: this checkout's acp_fast, not an installed copy.
    env = {**os.environ, "MYPYPATH": str(REPO)}
    proc = subprocess.run(
        [
            sys.executable, "-m", "mypy",
            "--strict",
            "--follow-imports=silent",  # judge the example, not the package
            "--no-incremental", "--cache-dir", os.devnull, "--config-file", os.devnull,
            "--no-error-summary", "--show-error-codes",
            source.name,
        ],
        check=False, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300,
    )
    errors: dict[int, list[str]] = {}
    for line in proc.stdout.splitlines():
        found = re.match(rf"{re.escape(source.name)}:(\d+): error: (.*)", line)
        if found:
            errors.setdefault(int(found.group(1)), []).append(found.group(2))
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert set(errors) == bad, f"unexpected mypy verdicts:\n{proc.stdout}{proc.stderr}"


# ---------------------------------------------------------------------------
# Generator: naming helpers, clash guard, --check
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_surfaces", REPO / "scripts" / "gen_surfaces.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generator_lists_the_method_modules(generator: ModuleType) -> None:
    assert {"methods_v1.py", "methods_v2.py"} <= set(generator.GENERATED)


def test_generator_naming_helpers(generator: ModuleType) -> None:
    path = generator.method_path
    assert path("initialize") == (None, "initialize")
    assert path("session/set_config_option") == ("session", "set_config_option")
    assert path("$/cancel_request") == ("protocol", "cancel_request")
    assert path("a-b/c.d") == ("a_b", "c_d")
    assert path("x/class") == ("x", "class_")
    assert path("x/2fa") == ("x", "_2fa")
    assert path("x/y/z") == ("x", "y_z")


def test_generator_refuses_clashing_names(generator: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    row = (2, "request", "agent", "stable", "PromptRequest", "PromptResponse")
    rows = {"session/a-b": [row], "session/a_b": [row]}
    monkeypatch.setattr(generator, "method_rows", lambda schemas: rows)
    with pytest.raises(SystemExit, match=r"session\.a_b"):
        generator.render_methods({}, 2)
    rows = {"ALL": [row]}
    monkeypatch.setattr(generator, "method_rows", lambda schemas: rows)
    with pytest.raises(SystemExit, match="ALL"):
        generator.render_methods({}, 2)




def test_generator_check_flags_a_stale_method_module(
    generator: ModuleType, schema_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    package = Path(methods_v2.__file__).resolve().parent  # the acp_fast under test
    assert generator.main(["--schema-dir", str(schema_dir), "--out-dir", str(package), "--check"]) == 0
    for name in generator.GENERATED:
        shutil.copy(package / name, tmp_path / name)
    args = ["--schema-dir", str(schema_dir), "--out-dir", str(tmp_path), "--check"]
    assert generator.main(args) == 0
    stale = tmp_path / "methods_v2.py"
    stale.write_text(stale.read_text().replace('"session/prompt", 2', '"session/prompt", 1'))
    assert generator.main(args) == 1
    assert "methods_v2.py" in capsys.readouterr().err

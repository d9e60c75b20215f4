"""A learner's model file, read the way `train --model` needs it: its definitions only (never its script
part), bound to its sha256, with the globals its classes read but only its script sets.

读取你的模型文件：只执行定义（类、函数、import、常量），不运行脚本部分；以 sha256 绑定。

Their file often trains at module level (a Colab export) or reads `input.txt` to count its vocabulary. Importing
it would run all of that, so only what defines something runs here: imports, classes, functions, and
assignments whose right side calls nothing but a few harmless builtins and their own config classes. A global
that their classes read but only their script sets (`vocab_size = len(chars)`) is filled in by the caller
(`overrides`): ours where it is a size we own (the vocabulary, the classes, the context), else the value their
own program gave it when it was watched.
"""
from __future__ import annotations

import ast
import builtins
import hashlib
import sys
import types
from pathlib import Path

from ..errors import UserError

CHEAP_CALLS = {"int", "float", "str", "bool", "dict", "list", "tuple", "set", "range", "len", "min", "max", "round",
               "abs", "sum", "sorted", "pow", "device", "is_available", "get", "sqrt", "log", "dtype", "getenv"}


def sha256_text(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def read_source(path: Path, sha256: str | None = None) -> str:
    """The file's text; with `sha256`, refused in one line unless its bytes still have that digest."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise UserError(f"your model file {path} cannot be read ({e.strerror or e}); the run keeps its copy as "
                        f"{path.name} in the run folder") from None
    if sha256 and sha256_text(data) != sha256:
        raise UserError(f"{path} changed since this run was trained (sha256 {sha256_text(data)[:12]}…, the run "
                        f"recorded {sha256[:12]}…): a run trains one source; start a new run (--out) for the new file")
    import importlib.util
    return importlib.util.decode_source(data)


def _config_classes(tree: ast.Module) -> set[str]:
    """Their classes that are not modules (dataclass configs, plain holders): cheap to call at the top level."""
    out = set()
    for n in tree.body:
        if isinstance(n, ast.ClassDef):
            bases = {ast.unparse(b).split(".")[-1] for b in n.bases}
            if not bases & {"Module", "nn.Module"} and not any(b.endswith("Module") or b.endswith("Layer")
                                                                 for b in bases):
                out.add(n.name)
    return out


def _cheap(value: ast.AST, configs: set[str]) -> bool:
    for n in ast.walk(value):
        if isinstance(n, ast.Call):
            name = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
            if name not in CHEAP_CALLS and name not in configs:
                return False
        if isinstance(n, (ast.Lambda, ast.Await, ast.Yield, ast.NamedExpr)):
            return False
    return True


def defines(node: ast.AST, configs: set[str]) -> bool:
    if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return True
    if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
        return _cheap(node.value, configs)
    if isinstance(node, ast.Try):  # `try: import x except ImportError: ...`
        return all(isinstance(b, (ast.Import, ast.ImportFrom, ast.Pass)) for b in node.body)
    return False


def sibling_imports(source: str, folder: Path) -> list[str]:
    """Modules their file imports from its own folder: the run copies this one file only."""
    found = []
    for n in ast.walk(ast.parse(source)):
        names = [a.name for a in n.names] if isinstance(n, ast.Import) else \
            [n.module] if isinstance(n, ast.ImportFrom) and n.module and not n.level else []
        for name in names:
            top = name.split(".")[0]
            if (folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file():
                found.append(top)
    return sorted(set(found))


def read_globals(source: str) -> set[str]:
    """Names their classes and functions read from the module (not their own locals)."""
    read = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            local = {a.arg for a in ast.walk(node) if isinstance(a, ast.arg)} | \
                    {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
            read |= {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
                     and n.id not in local}
    return read


def free_globals(source: str) -> set[str]:
    """Names their classes and functions read that the definitions do not set (nor builtins)."""
    tree = ast.parse(source)
    configs = _config_classes(tree)
    defined = set(dir(builtins))
    for node in tree.body:
        if not defines(node, configs):
            continue
        for n in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)) else [node]:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(n.name)
            elif isinstance(n, ast.alias):
                defined.add((n.asname or n.name).split(".")[0])
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
                defined.add(n.id)
    return read_globals(source) - defined


def load_definitions(path: Path, source: str, overrides: dict | None = None) -> types.ModuleType:
    """Their file as a module of its definitions (the module docstring); `overrides` set as globals first."""
    tree = ast.parse(source, str(path))
    configs = _config_classes(tree)
    name = f"your_model_{sha256_text(source.encode())[:12]}"
    module = types.ModuleType(name)
    module.__file__ = str(path)
    vars(module).update(overrides or {})
    sys.modules[name] = module  # dataclasses and pickling look their module up by name
    for node in tree.body:
        if not defines(node, configs):
            continue
        code = compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec")
        try:
            exec(code, vars(module))  # noqa: S102 - the learner's own definitions, on their machine (docs/your-model.md)
        except (ImportError, SyntaxError) as e:
            raise UserError(f"your model file {path.name}, line {node.lineno}: {type(e).__name__}: {e}") from None
        except Exception:  # noqa: BLE001 - a constant their script part would have set: filled by overrides
            pass
        for k, v in (overrides or {}).items():  # their constant of the same name does not undo ours
            vars(module)[k] = v
    return module

"""Python source -> functions (with what they call) and log / raise messages. Pure: text in,
records out; the selectors decide which of them mean something."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from tools.gen_knowledge import templates as T

LOG_LEVELS = {
    "debug": "debug", "info": "info", "warning": "warning", "warn": "warning",
    "error": "error", "critical": "error", "fatal": "error", "exception": "exception",
    "debug_once": "debug", "info_once": "info", "warning_once": "warning",
}
# receivers that are loggers (``logger.warning``, ``self.logger.info``, ``logging.error``)
_LOGGERS = {"logger", "log", "_logger", "LOG", "LOGGER", "logging", "_LOGGER", "_log", "log_"}


@dataclass
class PyFunction:
    qualname: str
    name: str
    line: int
    decorators: list[str]
    calls: set[str] = field(default_factory=set)  # dotted callee text: "work.wait", "time.sleep"
    returns: set[str] = field(default_factory=set)  # names returned: "work", "None"
    is_async: bool = False


@dataclass
class PyMessage:
    function: str  # qualname of the enclosing function ("" at module level)
    line: int
    level: str
    via: str  # "log" | "raise" | "warn" | "print"
    tokens: list[T.Token]
    exc: str = ""  # the exception class for via="raise"


def dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else node.attr
    if isinstance(node, ast.Call):
        return dotted(node.func) + "()"
    return ""


def _tokens_of_expr(node: ast.AST, has_args: bool) -> list[T.Token] | None:
    """Tokens of a message expression: a constant, an f-string, "..." % x, "...".format(),
    or a concatenation of those. None when the text is not known statically."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        # logging substitutes %-fields only when arguments follow the message
        return T.percent_tokens(node.value) if has_args else T.literal_tokens(node.value)
    if isinstance(node, ast.JoinedStr):
        out: list[T.Token] = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(("lit", str(v.value)))
            elif isinstance(v, ast.FormattedValue):
                text = ast.unparse(v.value)
                conv = f"!{chr(v.conversion)}" if v.conversion and v.conversion > 0 else ""
                spec = ""
                if v.format_spec is not None and isinstance(v.format_spec, ast.JoinedStr):
                    spec = ":" + "".join(str(c.value) for c in v.format_spec.values
                                         if isinstance(c, ast.Constant))
                out.append(("ph", "{" + text + conv + spec + "}"))
        return T._merge(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        if isinstance(node.left, ast.Constant) and isinstance(node.left.value, str):
            return T.percent_tokens(node.left.value)
        return None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left = _tokens_of_expr(node.left, has_args)
        right = _tokens_of_expr(node.right, has_args)
        if left is None and right is None:
            return None
        return T._merge((left or [("ph", "{...}")]) + (right or [("ph", "{...}")]))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and node.func.attr == "format" and isinstance(node.func.value, ast.Constant)
            and isinstance(node.func.value.value, str)):
        return T.brace_tokens(node.func.value.value)
    return None


def _is_logger(recv: ast.AST) -> bool:
    name = dotted(recv)
    last = name.rpartition(".")[2]
    return last in _LOGGERS or last.endswith("logger") or last.endswith("_log")


class _Walker(ast.NodeVisitor):
    def __init__(self) -> None:
        self.functions: list[PyFunction] = []
        self.messages: list[PyMessage] = []
        self._stack: list[str] = []
        self._fn: list[PyFunction] = []
        # per function: a name bound to a message text (msg = f"..."; logger.info(msg))
        self._texts: list[dict[str, ast.AST]] = [{}]

    def _visit_def(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        qual = ".".join(self._stack + [node.name])
        fn = PyFunction(qual, node.name, node.lineno,
                        [dotted(d.func if isinstance(d, ast.Call) else d) for d in node.decorator_list],
                        is_async=isinstance(node, ast.AsyncFunctionDef))
        self.functions.append(fn)
        self._stack.append(node.name)
        self._fn.append(fn)
        self._texts.append({})
        self.generic_visit(node)
        self._texts.pop()
        self._fn.pop()
        self._stack.pop()

    visit_FunctionDef = _visit_def
    visit_AsyncFunctionDef = _visit_def

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._stack.append(node.name)
        self.generic_visit(node)
        self._stack.pop()

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            name = node.targets[0].id
            if _tokens_of_expr(node.value, False) is not None:
                self._texts[-1][name] = node.value
            else:
                self._texts[-1].pop(name, None)
        self.generic_visit(node)

    def _message_expr(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Name) and node.id in self._texts[-1]:
            return self._texts[-1][node.id]
        return node

    def visit_Return(self, node: ast.Return) -> None:
        if self._fn and node.value is not None:
            self._fn[-1].returns.add(dotted(node.value) or type(node.value).__name__)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        name = dotted(node.func)
        if self._fn and name:
            self._fn[-1].calls.add(name)
        f = node.func
        if isinstance(f, ast.Attribute) and f.attr in LOG_LEVELS and _is_logger(f.value) and node.args:
            toks = _tokens_of_expr(self._message_expr(node.args[0]), len(node.args) > 1)
            if toks:
                self._add(node.lineno, LOG_LEVELS[f.attr], "log", toks)
        elif name == "print" and node.args and not any(k.arg == "file" for k in node.keywords):
            toks = _tokens_of_expr(node.args[0], False)
            if toks:
                self._add(node.lineno, "info", "print", toks)
        elif name in ("warnings.warn", "warn") and node.args:
            toks = _tokens_of_expr(node.args[0], False)
            if toks:
                self._add(node.lineno, "warning", "warn", toks)
        self.generic_visit(node)

    def visit_Raise(self, node: ast.Raise) -> None:
        exc = node.exc
        if isinstance(exc, ast.Call) and exc.args:
            toks = _tokens_of_expr(self._message_expr(exc.args[0]), False)
            if toks:
                self._add(node.lineno, "error", "raise", toks, dotted(exc.func))
        self.generic_visit(node)

    def _add(self, line: int, level: str, via: str, toks: list[T.Token], exc: str = "") -> None:
        fn = self._fn[-1].qualname if self._fn else ""
        self.messages.append(PyMessage(fn, line, level, via, toks, exc))


def parse(source: str, filename: str = "<src>") -> tuple[list[PyFunction], list[PyMessage]]:
    tree = ast.parse(source, filename)
    w = _Walker()
    w.visit(tree)
    return w.functions, w.messages

"""Skills: instructions on disk that the model pulls in when a task calls for them.

A skill is a directory holding a ``SKILL.md``::

    <project>/.fanloop/skills/<name>/SKILL.md     the project's skills
    ~/.fanloop/skills/<name>/SKILL.md             the user's skills (a project skill of the
                                                  same name wins)

``SKILL.md`` may open with front matter giving its name and a one-line description::

    ---
    name: release-notes
    description: Write release notes from the git log since the last tag.
    ---
    # Release notes
    ...

Without front matter (or without those keys) the name is the directory's and the description
is the first line of text that is not a heading. Only the names and descriptions go into the
system prompt (:func:`skills_prompt`); the model reads a skill in full with the ``read_skill``
tool (:class:`ReadSkillTool`) when it needs it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from ._log import logger
from .errors import ToolError
from .tools.base import Tool, ToolResult

__all__ = ["ReadSkillTool", "Skill", "discover_skills", "skills_prompt"]

SKILLS_DIR = Path(".fanloop") / "skills"
SKILL_FILE = "SKILL.md"
_MAX_DESCRIPTION = 300
_KEY = re.compile(r"^([A-Za-z_][\w-]*)\s*:\s*(.*)$")


@dataclass(frozen=True, slots=True)
class Skill:
    """One discovered skill.

    Attributes:
        name: what the model passes to ``read_skill``.
        description: one line saying when the skill is useful.
        path: the ``SKILL.md`` file.
        source: ``"project"`` or ``"home"``.
    """

    name: str
    description: str
    path: Path
    source: Literal["project", "home"]

    @property
    def directory(self) -> Path:
        """The skill's directory (files the skill mentions are relative to it)."""
        return self.path.parent

    def read(self) -> str:
        """The full text of ``SKILL.md``."""
        return self.path.read_text(encoding="utf-8", errors="replace")


def discover_skills(root: str | Path | None = None, home: str | Path | None = None) -> list[Skill]:
    """Find the skills of a project and of the user, sorted by name.

    Args:
        root: the project directory; defaults to the current directory.
        home: the user's home directory; defaults to ``Path.home()``.

    Returns:
        Every skill found; when a project skill and a home skill share a name, the project's.
        A ``SKILL.md`` that cannot be read is skipped (and logged).
    """
    root_dir = Path(root) if root is not None else Path.cwd()
    home_dir = Path(home) if home is not None else Path.home()
    found: dict[str, Skill] = {}
    # home first, so the project's skills replace them
    sources: tuple[tuple[Literal["project", "home"], Path], ...] = (
        ("home", home_dir),
        ("project", root_dir),
    )
    for source, base in sources:
        for skill in _scan(base / SKILLS_DIR, source):
            found[skill.name] = skill
    return sorted(found.values(), key=lambda s: s.name)


def _scan(directory: Path, source: Literal["project", "home"]) -> Iterable[Skill]:
    if not directory.is_dir():
        return []
    skills: dict[str, Skill] = {}
    for path in sorted(directory.glob(f"*/{SKILL_FILE}")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            logger.warning("skill_unreadable", path=str(path), error=repr(err))
            continue
        skill = _parse(text, path, source)
        if skill.name in skills:
            logger.warning(
                "skill_name_clash",
                name=skill.name,
                kept=str(skills[skill.name].path),
                skipped=str(path),
            )
            continue
        skills[skill.name] = skill
    return skills.values()


def _parse(text: str, path: Path, source: Literal["project", "home"]) -> Skill:
    meta, body = _front_matter(text)
    name = _one_line(str(meta.get("name") or "")) or path.parent.name
    description = _one_line(str(meta.get("description") or "")) or _first_line(body)
    if len(description) > _MAX_DESCRIPTION:
        description = description[: _MAX_DESCRIPTION - 1].rstrip() + "…"
    return Skill(name=name, description=description, path=path, source=source)


def _front_matter(text: str) -> tuple[dict[str, Any], str]:
    """Split ``---``-fenced front matter (simple ``key: value`` lines) from the body.

    Understands plain, quoted and folded (``>`` / ``|`` followed by indented lines) values,
    which covers what skill files use, without a YAML dependency.
    """
    lines = text.lstrip("\ufeff").splitlines()
    if not lines or lines[0].strip() != "---":
        return {}, text
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    except StopIteration:
        return {}, text
    meta: dict[str, Any] = {}
    key: str | None = None
    for line in lines[1:end]:
        match = _KEY.match(line)
        if match and not line[:1].isspace():
            key, value = match.group(1).lower(), match.group(2).strip()
            meta[key] = "" if value in (">", "|", ">-", "|-") else _unquote(value)
        elif key is not None and line.strip():  # a continuation line
            meta[key] = f"{meta[key]} {line.strip()}".strip()
    return meta, "\n".join(lines[end + 1 :])


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _first_line(body: str) -> str:
    for line in body.splitlines():
        stripped = line.strip()
        if stripped and not stripped.startswith("#") and stripped not in ("---", "```"):
            return _one_line(stripped)
    return ""


def skills_prompt(skills: Iterable[Skill]) -> str:
    """The system-prompt block listing the skills, or ``""`` when there are none.

    It names each skill with its description and tells the model to load a skill with the
    ``read_skill`` tool before doing a task the skill covers.
    """
    items = list(skills)
    if not items:
        return ""
    lines = [
        "## Skills",
        "",
        "Skills are instructions for particular kinds of task. When a task matches a skill's "
        "description, call the `read_skill` tool with the skill's name and follow what it "
        "says before you start. Read a skill only when it is relevant.",
        "",
    ]
    for skill in items:
        lines.append(
            f"- {skill.name}: {skill.description}" if skill.description else f"- {skill.name}"
        )
    return "\n".join(lines)


class ReadSkillTool(Tool):
    """``read_skill(name)``: the full text of one skill. Read-only and concurrent-safe.

    Example:
        >>> skills = discover_skills()
        >>> tools = [ReadSkillTool(skills)] if skills else []
    """

    name = "read_skill"
    dangerous = False
    concurrent_safe = True

    def __init__(self, skills: Iterable[Skill] | Mapping[str, Skill]) -> None:
        """Offer these skills (a list from :func:`discover_skills`, or a name → skill map)."""
        items = skills.values() if isinstance(skills, Mapping) else skills
        self.skills: dict[str, Skill] = {s.name: s for s in items}
        names = sorted(self.skills)
        self.description = (
            "Read the full instructions of a skill listed in the system prompt. "
            "Call it before doing a task that matches the skill's description."
        )
        name_schema: dict[str, Any] = {"type": "string", "description": "The skill's name."}
        if names:
            name_schema["enum"] = names
        self.parameters = {
            "type": "object",
            "properties": {"name": name_schema},
            "required": ["name"],
            "additionalProperties": False,
        }

    async def run(self, name: str) -> ToolResult:
        """Return the skill's ``SKILL.md`` with a line saying where it lives.

        Raises:
            ToolError: no skill has that name (the message lists those that exist), or its
                file can no longer be read.
        """
        skill = self.skills.get(name)
        if skill is None:
            available = ", ".join(sorted(self.skills)) or "none"
            raise ToolError(f"No skill named {name!r}. Available skills: {available}.")
        try:
            text = await anyio.Path(skill.path).read_text(encoding="utf-8", errors="replace")
        except OSError as err:
            raise ToolError(f"Could not read skill {name!r} ({skill.path}): {err}") from None
        header = (
            f"Skill {skill.name!r} ({skill.path}). "
            f"Paths it mentions are relative to {skill.directory}."
        )
        return ToolResult(
            f"{header}\n\n{text}", metadata={"skill": skill.name, "path": str(skill.path)}
        )

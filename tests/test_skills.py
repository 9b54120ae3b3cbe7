"""Skills: discovery in the project and the user's home, the prompt block, read_skill."""

from __future__ import annotations

from pathlib import Path

import pytest

from fanloop.errors import ToolError
from fanloop.skills import ReadSkillTool, Skill, discover_skills, skills_prompt


def write_skill(base: Path, dirname: str, text: str) -> Path:
    path = base / ".fanloop" / "skills" / dirname / "SKILL.md"
    path.parent.mkdir(parents=True)
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "project").mkdir()
    return tmp_path / "project"


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


def test_front_matter_gives_name_and_description(project: Path, home: Path) -> None:
    path = write_skill(
        project,
        "notes",
        "---\nname: release-notes\ndescription: Write release notes from the git log.\n---\n"
        "# Release notes\n\nSteps...\n",
    )
    assert discover_skills(project, home) == [
        Skill("release-notes", "Write release notes from the git log.", path, "project")
    ]


def test_fallbacks_are_the_directory_and_first_text_line(project: Path, home: Path) -> None:
    write_skill(project, "pdf", "# PDF handling\n\n## Intro\n\nFill in PDF forms with pdftk.\n")
    write_skill(project, "blank", "---\nname:\n---\n# Only a heading\n")
    blank, pdf = discover_skills(project, home)
    assert (pdf.name, pdf.description) == ("pdf", "Fill in PDF forms with pdftk.")
    assert (blank.name, blank.description) == ("blank", "")


def test_yaml_ish_values(project: Path, home: Path) -> None:
    write_skill(
        project,
        "a",
        '---\nname: "quoted name"\ndescription: >\n  Folded over\n  two lines.\n'
        "license: MIT\n---\nbody\n",
    )
    write_skill(project, "b", "---\ndescription: 'single quoted'\n---\n")
    write_skill(project, "c", "---\nname: unterminated\nno closing fence\n")
    write_skill(project, "d", "\ufeff---\nname: bom\ndescription: x   y\n---\n")
    found = {s.path.parent.name: s for s in discover_skills(project, home)}
    assert (found["a"].name, found["a"].description) == ("quoted name", "Folded over two lines.")
    assert (found["b"].name, found["b"].description) == ("b", "single quoted")
    assert found["c"].name == "c"  # no closing fence: no front matter, just text
    assert found["c"].description == "name: unterminated"
    assert (found["d"].name, found["d"].description) == ("bom", "x y")


def test_long_descriptions_are_cut(project: Path, home: Path) -> None:
    write_skill(project, "long", f"---\ndescription: {'word ' * 100}\n---\n")
    (skill,) = discover_skills(project, home)
    assert len(skill.description) == 300
    assert skill.description.endswith("…")


def test_project_wins_over_home_and_results_are_sorted(project: Path, home: Path) -> None:
    write_skill(home, "deploy", "---\ndescription: the user's deploy\n---\n")
    write_skill(home, "zeta", "Home only.\n")
    write_skill(project, "deploy", "---\ndescription: the project's deploy\n---\n")
    write_skill(project, "alpha", "Project only.\n")
    skills = discover_skills(project, home)
    assert [(s.name, s.source) for s in skills] == [
        ("alpha", "project"),
        ("deploy", "project"),
        ("zeta", "home"),
    ]
    assert skills[1].description == "the project's deploy"


def test_same_name_twice_in_one_place_keeps_the_first(project: Path, home: Path) -> None:
    first = write_skill(project, "a-dir", "---\nname: same\n---\n")
    write_skill(project, "b-dir", "---\nname: same\n---\n")
    assert [s.path for s in discover_skills(project, home)] == [first]


def test_nothing_to_discover(project: Path, home: Path) -> None:
    (project / ".fanloop" / "skills" / "empty-dir").mkdir(parents=True)
    (project / ".fanloop" / "skills" / "stray.md").write_text("not a skill")
    assert discover_skills(project, home) == []
    assert skills_prompt([]) == ""


def test_defaults_are_the_cwd_and_home(
    project: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_skill(project, "here", "From the cwd.\n")
    write_skill(home, "mine", "From home.\n")
    monkeypatch.chdir(project)
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: home))
    assert [s.name for s in discover_skills()] == ["here", "mine"]


def test_unreadable_skill_is_skipped(project: Path, home: Path) -> None:
    write_skill(project, "ok", "Fine.\n")
    broken = project / ".fanloop" / "skills" / "broken" / "SKILL.md"
    broken.mkdir(parents=True)  # a directory where the file should be: reading it fails
    assert [s.name for s in discover_skills(project, home)] == ["ok"]


def test_prompt_lists_every_skill_and_names_the_tool(project: Path, home: Path) -> None:
    write_skill(project, "pdf", "---\ndescription: Fill PDF forms.\n---\n")
    write_skill(project, "bare", "# Nothing but a heading\n")
    prompt = skills_prompt(discover_skills(project, home))
    assert "`read_skill`" in prompt
    assert prompt.splitlines()[-2:] == ["- bare", "- pdf: Fill PDF forms."]


async def test_read_skill_returns_the_full_text(project: Path, home: Path) -> None:
    text = "---\nname: pdf\ndescription: Fill PDF forms.\n---\n# PDF\n\nRun `scripts/fill.py`.\n"
    path = write_skill(project, "pdf", text)
    tool = ReadSkillTool(discover_skills(project, home))

    result = await tool.run(name="pdf")

    assert not result.is_error
    assert result.content.endswith(text)
    assert str(path.parent) in result.content.splitlines()[0]
    assert result.metadata == {"skill": "pdf", "path": str(path)}


async def test_read_skill_unknown_name_lists_the_available(project: Path, home: Path) -> None:
    write_skill(project, "pdf", "x\n")
    write_skill(home, "deploy", "y\n")
    tool = ReadSkillTool(discover_skills(project, home))
    with pytest.raises(ToolError, match=r"No skill named 'nope'\. Available skills: deploy, pdf\."):
        await tool.run(name="nope")
    with pytest.raises(ToolError, match="Available skills: none"):
        await ReadSkillTool([]).run(name="x")


async def test_read_skill_whose_file_vanished(project: Path, home: Path) -> None:
    path = write_skill(project, "gone", "x\n")
    tool = ReadSkillTool(discover_skills(project, home))
    path.unlink()
    with pytest.raises(ToolError, match="Could not read skill 'gone'"):
        await tool.run(name="gone")


def test_read_skill_is_a_read_only_tool(project: Path, home: Path) -> None:
    write_skill(project, "b", "x\n")
    write_skill(project, "a", "x\n")
    tool = ReadSkillTool(discover_skills(project, home))
    assert tool.name == "read_skill"
    assert not tool.dangerous
    assert tool.concurrent_safe
    assert tool.parameters["properties"]["name"]["enum"] == ["a", "b"]
    assert tool.validate({"name": "a"}) == {"name": "a"}
    with pytest.raises(ToolError):
        tool.validate({})
    assert tool.preview(name="a") == "read_skill(name='a')"
    by_map = ReadSkillTool({s.name: s for s in discover_skills(project, home)})
    assert sorted(by_map.skills) == ["a", "b"]


async def test_agent_with_skills_lists_them_and_reads_one(
    project: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from fanloop import Agent
    from fanloop.messages import ToolResultPart
    from fanloop.testing import ScriptedProvider, call, reply

    write_skill(project, "pdf", "---\ndescription: Fill PDF forms.\n---\nUse pdftk.\n")
    monkeypatch.setattr(Path, "home", classmethod(lambda cls: home))
    provider = ScriptedProvider([reply(tool_calls=[call("read_skill", name="pdf")]), "ok"])
    agent = Agent(provider, skills=True, workspace=str(project))

    result = await agent.run("fill the form")

    assert "- pdf: Fill PDF forms." in (provider.requests[0].system or "")
    parts = [p for m in result.messages for p in m.content if isinstance(p, ToolResultPart)]
    assert parts[0].content.endswith("Use pdftk.\n")

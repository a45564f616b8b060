"""Local USD assets for Isaac Lab tasks: MJCF files converted at first use, and a locally made ground plane.

Isaac Lab's task configs point their robots and ground at a cloud bucket (``ISAACLAB_NUCLEUS_DIR``) that an
offline machine cannot reach. Before the env is built, ``localize_scene`` walks the scene config and points every
remote ``usd_path`` at a local file:

1. ``assets_dir/<name>`` when ``env.kwargs.assets_dir`` names a folder holding the USD (a user's own copies);
2. else ``assets_dir/<stem>.xml`` or robopt's own MJCF (``robopt/envs/isaac_mjcf/<stem>.xml``), converted
   with ``mujoco-usd-converter`` into a cache folder (``$ROBOPT_CACHE``, default ``~/.cache/robopt``) keyed by
   the MJCF's hash, so a changed MJCF is converted again;
3. else a one-line ``ValueError`` naming the asset and how to provide it. Nothing is downloaded, ever.

The ground plane (``GroundPlaneCfg``, a remote USD, and the flat ``plane`` terrain of ``TerrainImporterCfg``, which
spawns that same USD) becomes a plane converted from a one-geom MJCF.
Robot MJCF written for Isaac tasks keeps the joint and body names the task's code looks up (the cart-pole's
``slider_to_cart`` and ``cart_to_pole``); its masses and sizes are robopt's, not the cloud asset's.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

MJCF_DIR = Path(__file__).parent / "isaac_mjcf"
REMOTE_PREFIXES = ("http://", "https://", "omniverse://", "s3://")
GROUND_MJCF = """<mujoco model="ground">
  <worldbody>
    <geom name="ground" type="plane" size="{half} {half} 0.1" friction="1 0.005 0.0001"/>
  </worldbody>
</mujoco>
"""


def cache_dir() -> Path:
    return Path(os.environ.get("ROBOPT_CACHE", Path.home() / ".cache" / "robopt")) / "isaac_usd"


def is_remote(path: str) -> bool:
    from isaaclab.utils.assets import ISAACLAB_NUCLEUS_DIR, NUCLEUS_ASSET_ROOT_DIR

    return path.startswith(REMOTE_PREFIXES) or path.startswith((ISAACLAB_NUCLEUS_DIR, NUCLEUS_ASSET_ROOT_DIR))


def convert_mjcf(mjcf: Path | str, text: str | None = None) -> Path:
    """The USD of an MJCF file (or of ``text``, named after ``mjcf``), converted once into the cache."""
    text = Path(mjcf).read_text() if text is None else text
    digest = hashlib.sha256(text.encode()).hexdigest()[:16]
    out = cache_dir() / f"{Path(mjcf).stem}-{digest}"
    done = sorted(out.glob("*.usda"))  # the converter names the file after the MJCF's model name
    if done:
        return done[0]
    source = out / "source" / f"{Path(mjcf).stem}.xml"
    source.parent.mkdir(parents=True, exist_ok=True)
    source.write_text(text)
    try:
        from mujoco_usd_converter import Converter

        Converter().convert(str(source), str(out))
    except Exception as error:  # the converter's errors are many and undocumented: report one line
        raise ValueError(f"could not convert {mjcf} to USD with mujoco-usd-converter: {error}") from None
    done = sorted(out.glob("*.usda"))
    if len(done) != 1:
        raise ValueError(f"mujoco-usd-converter wrote {len(done)} top-level USD files for {mjcf} (in {out}), not one")
    return done[0]


def local_usd(remote: str, assets_dir: str) -> Path:
    """A local USD standing in for ``remote`` (see the module docstring); a ValueError when there is none."""
    name = Path(remote).name
    stem = name.rsplit(".", 1)[0]
    if assets_dir:
        folder = Path(assets_dir).expanduser()
        if not folder.is_dir():
            raise ValueError(f"env.kwargs.assets_dir={assets_dir!r} is not a folder")
        for candidate in (folder / name, folder / f"{stem}.usda", folder / f"{stem}.usdc"):
            if candidate.exists():
                return candidate
        if (folder / f"{stem}.xml").exists():
            return convert_mjcf(folder / f"{stem}.xml")
    if (MJCF_DIR / f"{stem}.xml").exists():
        return convert_mjcf(MJCF_DIR / f"{stem}.xml")
    raise ValueError(
        f"Isaac Lab asset {remote} is on a remote server that robopt never downloads from; put {name} (or an MJCF "
        f"{stem}.xml to convert) in a folder and pass env.kwargs.assets_dir=<folder>"
    )


def ground_usd(size: tuple[float, float]) -> Path:
    half = max(size) / 2
    return convert_mjcf("ground.xml", GROUND_MJCF.format(half=half))


def localize_scene(scene_cfg, assets_dir: str = "") -> list[str]:
    """Point every remote asset of ``scene_cfg`` (an ``InteractiveSceneCfg``) at a local USD, in place.

    Returns what was replaced, one ``"<attribute>: <remote> -> <local>"`` line each.
    """
    import isaaclab.sim as sim_utils
    from isaaclab.terrains import TerrainImporterCfg

    replaced = []
    for name in list(vars(scene_cfg)):
        asset = getattr(scene_cfg, name)
        if isinstance(asset, TerrainImporterCfg):  # a flat "plane" terrain imports the remote ground plane
            if asset.terrain_type == "plane":
                local = ground_usd((200.0, 200.0))
                asset.terrain_type, asset.usd_path = "usd", str(local)
                replaced.append(f"{name}: plane terrain -> {local}")
            elif asset.terrain_type == "usd" and is_remote(asset.usd_path or ""):
                local = local_usd(asset.usd_path, assets_dir)
                replaced.append(f"{name}: {asset.usd_path} -> {local}")
                asset.usd_path = str(local)
            continue
        spawn = getattr(asset, "spawn", None)
        path = getattr(spawn, "usd_path", None)
        if spawn is None or not isinstance(path, str) or not is_remote(path):
            continue
        if isinstance(spawn, sim_utils.GroundPlaneCfg):
            local = ground_usd(spawn.size)
            asset.spawn = sim_utils.UsdFileCfg(usd_path=str(local))
        else:
            local = local_usd(path, assets_dir)
            spawn.usd_path = str(local)
        replaced.append(f"{name}: {path} -> {local}")
    return replaced

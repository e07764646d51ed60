# SPDX-License-Identifier: Apache-2.0
"""meson install puts the binary in bin/ and the manual page in
share/man/man1/, checked in a DESTDIR."""

import json
import subprocess
from pathlib import Path

from conftest import HYPERPODRUN


def test_meson_install_into_destdir(tmp_path):
    build_root = Path(HYPERPODRUN).parents[2]
    assert (build_root / "meson-private").is_dir(), build_root
    installed = json.loads(subprocess.run(
        ["meson", "introspect", "--installed", str(build_root)],
        capture_output=True, text=True, check=True).stdout)
    prefix = json.loads(subprocess.run(
        ["meson", "introspect", "--buildoptions", str(build_root)],
        capture_output=True, text=True, check=True).stdout)
    prefix = next(o["value"] for o in prefix if o["name"] == "prefix")
    res = subprocess.run(
        ["meson", "install", "-C", str(build_root), "--no-rebuild",
         "--destdir", str(tmp_path)],
        capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr

    binary = tmp_path / Path(prefix).relative_to("/") / "bin" / "hyperpodrun"
    man = (tmp_path / Path(prefix).relative_to("/") / "share" / "man" /
           "man1" / "hyperpodrun.1")
    assert str(binary)[len(str(tmp_path)):] in installed.values()
    assert binary.is_file()
    out = subprocess.run([str(binary), "--version"], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert out.startswith("hyperpodrun ")
    version = out.split()[1]
    text = man.read_text()
    assert f'"hyperpodrun {version}"' in text
    assert "@VERSION@" not in text

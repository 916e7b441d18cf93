"""The SDK's PEP 517 build backend, in the standard library alone.

The SDK is pure Python with no dependencies, so its wheel is a zip of
airlock/ and its metadata. With this backend pip builds and installs it
offline, with any Python 3.9+ and its bundled pip (a venv's, pyenv's,
Debian's), with no setuptools or wheel installed: `pip install ./sdk/python`.
"""

import base64
import csv
import hashlib
import io
import os
import re
import tarfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "airlock"
# A fixed time for every entry: the same sources build the same bytes.
EPOCH = (2024, 1, 1, 0, 0, 0)


def _project():
    """The [project] table's strings of pyproject.toml (the keys used here)."""
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as f:
        text = f.read()
    table = re.search(r"^\[project\]\n(.*?)(?=^\[)", text, re.M | re.S).group(1)
    out = dict(re.findall(r'^([a-z-]+) = "([^"]*)"$', table, re.M))
    extras = re.search(r"^\[project\.optional-dependencies\]\n(.*?)(?=^\[|\Z)", text, re.M | re.S)
    out["extras"] = re.findall(r'^([a-z-]+) = \["([^"]+)"\]$', extras.group(1), re.M) if extras else []
    return out


def _dist(p):
    return p["name"].replace("-", "_") + "-" + p["version"]


def _metadata(p):
    lines = ["Metadata-Version: 2.1", "Name: " + p["name"], "Version: " + p["version"],
             "Summary: " + p.get("description", ""), "Requires-Python: " + p.get("requires-python", ">=3.9")]
    for extra, req in p["extras"]:
        lines += ["Provides-Extra: " + extra, 'Requires-Dist: %s; extra == "%s"' % (req, extra)]
    readme = os.path.join(ROOT, "README.md")
    body = ""
    if os.path.exists(readme):
        lines.append("Description-Content-Type: text/markdown")
        with open(readme, encoding="utf-8") as f:
            body = "\n" + f.read()
    return "\n".join(lines) + "\n" + body


def _sources():
    """The package's files, relative to ROOT, sorted."""
    out = []
    for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, PACKAGE)):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith((".py", ".typed")):
                out.append(os.path.relpath(os.path.join(dirpath, name), ROOT))
    return out


def _wheel(wheel_directory, files):
    """Writes a wheel of files ({name in the wheel: bytes}) and returns its name."""
    p = _project()
    info = _dist(p) + ".dist-info/"
    files = dict(files)
    files[info + "METADATA"] = _metadata(p).encode()
    files[info + "WHEEL"] = b"Wheel-Version: 1.0\nGenerator: airlock_build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = io.StringIO()
    w = csv.writer(record, lineterminator="\n")
    for name, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        w.writerow([name, "sha256=" + digest, len(data)])
    w.writerow([info + "RECORD", "", ""])
    files[info + "RECORD"] = record.getvalue().encode()
    name = _dist(p) + "-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for path, data in files.items():
            zi = zipfile.ZipInfo(path, EPOCH)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(zi, data)
    return name


def _read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


get_requires_for_build_editable = get_requires_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, {rel.replace(os.sep, "/"): _read(rel) for rel in _sources()})


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth line puts the sources themselves on sys.path.
    return _wheel(wheel_directory, {"__editable__.airlock_sandbox.pth": (ROOT + "\n").encode()})


def build_sdist(sdist_directory, config_settings=None):
    p = _project()
    name = _dist(p) + ".tar.gz"
    top = _dist(p) + "/"
    rels = ["pyproject.toml", "README.md", "_build/airlock_build.py"] + _sources()
    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as t:
        for rel in rels:
            if os.path.exists(os.path.join(ROOT, rel)):
                data = _read(rel)
                ti = tarfile.TarInfo(top + rel.replace(os.sep, "/"))
                ti.size, ti.mode, ti.mtime = len(data), 0o644, 1704067200
                t.addfile(ti, io.BytesIO(data))
        pkg = ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n" % (p["name"], p["version"])).encode()
        ti = tarfile.TarInfo(top + "PKG-INFO")
        ti.size, ti.mode, ti.mtime = len(pkg), 0o644, 1704067200
        t.addfile(ti, io.BytesIO(pkg))
    return name

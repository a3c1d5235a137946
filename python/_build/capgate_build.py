"""A PEP 517 build backend in the standard library, so that
``pip install ./python`` needs nothing from a package index: it zips the
``capgate`` package into a pure-Python wheel."""

import base64
import hashlib
import os
import zipfile

NAME = "capgate"
VERSION = "0.1.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TAG = "py3-none-any"

METADATA = """Metadata-Version: 2.1
Name: {name}
Version: {version}
Summary: Ask a capgate decision service whether a heavy call may run, from inside the app (Django/DRF middleware included)
License: Apache-2.0
Requires-Python: >=3.9
Provides-Extra: django
Requires-Dist: django>=3.2; extra == "django"
""".format(name=NAME, version=VERSION)

WHEEL = """Wheel-Version: 1.0
Generator: capgate_build
Root-Is-Purelib: true
Tag: {tag}
""".format(tag=TAG)


def _files():
    """The package's .py files, as (path in the wheel, path on disk)."""
    pkg = os.path.join(ROOT, NAME)
    for dirpath, dirnames, filenames in os.walk(pkg):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py"):
                full = os.path.join(dirpath, f)
                yield os.path.relpath(full, ROOT).replace(os.sep, "/"), full


def _digest(data):
    h = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return "sha256=" + h


def _write_wheel(directory, extra=()):
    name = "{}-{}-{}.whl".format(NAME, VERSION, TAG)
    dist = "{}-{}.dist-info".format(NAME, VERSION)
    record = []
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        entries = [(arc, open(full, "rb").read()) for arc, full in _files()]
        entries += list(extra)
        entries += [(dist + "/METADATA", METADATA.encode()), (dist + "/WHEEL", WHEEL.encode())]
        for arc, data in entries:
            z.writestr(arc, data)
            record.append("{},{},{}".format(arc, _digest(data), len(data)))
        record.append(dist + "/RECORD,,")
        z.writestr(dist + "/RECORD", "\n".join(record) + "\n")
    return name


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_editable(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _write_wheel(wheel_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    # A .pth file pointing at the source tree instead of a copy of it.
    return _write_wheel_pth(wheel_directory)


def _write_wheel_pth(directory):
    name = "{}-{}-{}.whl".format(NAME, VERSION, TAG)
    dist = "{}-{}.dist-info".format(NAME, VERSION)
    entries = [(NAME + ".pth", (ROOT + "\n").encode()),
               (dist + "/METADATA", METADATA.encode()), (dist + "/WHEEL", WHEEL.encode())]
    record = []
    with zipfile.ZipFile(os.path.join(directory, name), "w", zipfile.ZIP_DEFLATED) as z:
        for arc, data in entries:
            z.writestr(arc, data)
            record.append("{},{},{}".format(arc, _digest(data), len(data)))
        record.append(dist + "/RECORD,,")
        z.writestr(dist + "/RECORD", "\n".join(record) + "\n")
    return name

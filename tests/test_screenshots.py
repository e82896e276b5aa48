"""ScreenshotStore: content addressing, reference counts, both drivers."""

import asyncio
import io
import os

import numpy as np
import pytest
from PIL import Image

from asyncwebrl.rollout.screenshots import ScreenshotStore


def png(value: int, size=(64, 48)) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((size[1], size[0], 3), value, np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


@pytest.fixture(params=["memory", "file"])
def store(request, tmp_path):
    if request.param == "file":
        return ScreenshotStore("file", str(tmp_path / "shots"))
    return ScreenshotStore.in_memory()


def test_identical_screenshots_are_stored_once_and_freed_by_reference(store):
    a, b = png(10), png(200)
    key_a = store.put(a)
    assert store.put(a) == key_a and store.references(key_a) == 2
    key_b = asyncio.run(store.aput(b))
    assert store.stats.entries == 2 and store.stats.bytes_held == len(a) + len(b)
    assert store.stats.puts == 3 and store.stats.hits == 1
    assert store.get(key_a) == a
    assert store.get_array(key_b).shape == (48, 64, 3) and store.get_array(key_b)[0, 0, 0] == 200
    store.free([key_a])
    assert store.get(key_a) == a  # one reference left
    store.free([key_a, key_b])
    assert store.stats.entries == 0 and store.stats.bytes_held == 0 and store.keys() == []
    with pytest.raises(KeyError):
        store.get(key_a)


def test_freeing_more_than_was_put_is_an_error_not_a_silent_miss(store):
    key = store.put(png(1))
    store.free([key])
    with pytest.raises(KeyError):
        store.free([key])
    with pytest.raises(KeyError):
        store.retain("no-such-key")


def test_file_driver_writes_files_that_a_second_store_can_read(tmp_path):
    path = str(tmp_path / "shared")
    writer = ScreenshotStore("file", path)
    key = writer.put(png(77))
    assert os.listdir(path) == [key]
    assert ScreenshotStore("file", path).get(key) == png(77)  # another host reading the same directory


def test_bad_driver_settings():
    with pytest.raises(ValueError):
        ScreenshotStore("s3", "")
    with pytest.raises(ValueError):
        ScreenshotStore("file", "")


def test_hosts_sharing_a_directory_keep_their_keys_apart(tmp_path):
    """Two hosts put the same screenshot; one frees it; the other's copy stays."""
    path = str(tmp_path / "shared")
    host0, host1 = ScreenshotStore("file", path, namespace="host0/"), ScreenshotStore("file", path, namespace="host1/")
    mine, theirs = host0.put(png(5)), host1.put(png(5))
    assert mine != theirs and mine.startswith("host0/") and theirs.startswith("host1/")
    host0.free([mine])
    assert host0.keys() == [] and host1.keys() == [theirs]
    assert host1.get(theirs) == png(5)

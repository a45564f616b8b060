"""The UDP packet codec: hand-built bytes, round trips, each rejection reason, and the sequence filter."""

from __future__ import annotations

import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

from robopt.sim2real.network import SequenceFilter
from robopt.sim2real.protocol import (
    KIND_ACTION,
    KIND_OBS,
    PacketError,
    decode,
    encode,
    obs_values,
    split_obs,
)


def reseal(body: bytes) -> bytes:
    """``body`` (everything before the crc) followed by its crc32: a packet intact at the checksum level."""
    return body + struct.pack("<I", zlib.crc32(body))


def reason_of(data: bytes, kind: int = KIND_ACTION, count=2) -> str:
    with pytest.raises(PacketError) as info:
        decode(data, kind, count)
    return info.value.reason


ACTION_2 = encode(KIND_ACTION, 7, 1.5, np.array([1.0, -2.0]))


def test_encode_matches_hand_built_bytes():
    # magic, version 1, kind 2, reserved 0, seq 7 (u32 LE), timestamp 1.5 (f64 LE: 0x3FF8000000000000),
    # count 2 (u16 LE), payload 1.0f (0x3F800000) and -2.0f (0xC0000000), then crc32 of those 30 bytes.
    body = bytes.fromhex("524250540102000007000000000000000000f83f02000000803f000000c0")
    assert len(body) == 22 + 4 * 2
    assert body == struct.pack("<4sBBHIdH2f", b"RBPT", 1, 2, 0, 7, 1.5, 2, 1.0, -2.0)
    assert ACTION_2 == body + struct.pack("<I", zlib.crc32(body))
    packet = decode(ACTION_2, KIND_ACTION, 2)
    assert (packet.kind, packet.seq, packet.timestamp) == (KIND_ACTION, 7, 1.5)
    np.testing.assert_array_equal(packet.values, np.array([1.0, -2.0], dtype=np.float32))


def test_obs_round_trip_and_split():
    obs = np.array([0.25, -3.0, 1e-3])
    data = encode(KIND_OBS, 2**32 - 1, 123.25, obs_values(obs, -4.5, True))
    assert len(data) == 26 + 4 * 5  # obs_dim 3 + reward + ended flag
    packet = decode(bytearray(data), KIND_OBS, 5)
    assert packet.seq == 2**32 - 1 and packet.timestamp == 123.25
    got_obs, reward, ended = split_obs(packet.values)
    np.testing.assert_array_equal(got_obs, obs.astype(np.float32).astype(np.float64))
    assert (reward, ended) == (-4.5, True)
    assert split_obs(decode(encode(KIND_OBS, 0, 0.0, obs_values(obs, 0.0, False)), KIND_OBS, 5).values)[2] is False
    hello = encode(KIND_ACTION, 3, 0.0, np.zeros(0))
    assert len(hello) == 26 and decode(hello, KIND_ACTION, (0, 2)).values.size == 0


def test_truncation_is_short_or_checksum():
    for length in range(len(ACTION_2)):
        assert reason_of(ACTION_2[:length]) == ("short" if length < 26 else "checksum"), length


def test_extra_bytes_break_the_checksum_and_resealed_ones_the_length():
    assert reason_of(ACTION_2 + b"\x00") == "checksum"
    assert reason_of(reseal(ACTION_2[:-4] + b"\x00\x00\x00\x00")) == "length"  # 4 bytes more than count 2 says
    assert reason_of(reseal(ACTION_2[:-8])) == "length"  # one value fewer than count 2 says


def test_every_single_bit_flip_is_a_checksum_error():
    for bit in range(8 * len(ACTION_2)):
        data = bytearray(ACTION_2)
        data[bit // 8] ^= 1 << (bit % 8)
        assert reason_of(bytes(data)) == "checksum", bit


def patch(offset: int, fmt: str, value) -> bytes:
    """ACTION_2 with one header field replaced at ``offset`` and the crc recomputed."""
    body = bytearray(ACTION_2[:-4])
    struct.pack_into(fmt, body, offset, value)
    return reseal(bytes(body))


def test_each_header_field_is_checked():
    assert reason_of(patch(0, "<4s", b"RBPX")) == "magic"
    assert reason_of(patch(4, "<B", 2)) == "version"
    assert reason_of(patch(5, "<B", 3)) == "kind"  # unknown kind
    assert reason_of(ACTION_2, kind=KIND_OBS) == "kind"  # a valid packet of the other kind
    assert reason_of(patch(6, "<H", 1)) == "reserved"
    assert reason_of(patch(20, "<H", 3)) == "length"  # count 3 but two values present
    assert reason_of(ACTION_2, count=3) == "count"
    assert reason_of(ACTION_2, count=(0, 3)) == "count"
    assert decode(ACTION_2, KIND_ACTION, None).values.size == 2


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_values_and_timestamps_are_rejected_unless_allowed(bad):
    data = encode(KIND_ACTION, 1, 0.0, np.array([0.0, bad]), allow_non_finite=True)
    assert reason_of(data) == "non_finite"
    assert np.isnan(decode(data, KIND_ACTION, 2, allow_non_finite=True).values[1]) == np.isnan(bad)
    assert reason_of(patch(12, "<d", bad)) == "non_finite"
    with pytest.raises(ValueError, match="finite"):
        encode(KIND_ACTION, 1, 0.0, np.array([0.0, bad]))


def test_encode_rejects_what_no_packet_can_hold():
    for kwargs, match in (
        (dict(kind=3), "kind"),
        (dict(seq=-1), "seq"),
        (dict(seq=2**32), "seq"),
        (dict(values=np.zeros(20000)), "datagram"),
    ):
        args = dict(kind=KIND_OBS, seq=0, timestamp=0.0, values=np.zeros(2)) | kwargs
        with pytest.raises(ValueError, match=match):
            encode(**args)


def test_sequence_filter_keeps_the_newest():
    f = SequenceFilter(window=8, resync_after=3)
    assert f.classify(10) == ("new", 0)
    assert f.classify(10) == ("duplicate", 0)
    assert f.classify(13) == ("new", 2)  # 11 and 12 missing
    assert f.classify(11) == ("reordered", 0)  # late: older than the newest
    assert f.classify(11) == ("duplicate", 0)  # seen before, even though older
    assert f.classify(14) == ("new", 0)
    assert f.newest == 14


def test_sequence_filter_wraps_and_resyncs():
    f = SequenceFilter(resync_after=3)
    assert f.classify(2**32 - 2) == ("new", 0)
    assert f.classify(1) == ("new", 2)  # 2**32-1 and 0 missing across the wrap
    assert f.classify(2**32 - 1) == ("reordered", 0)
    f = SequenceFilter(resync_after=3)
    f.classify(5000)
    assert [f.classify(s)[0] for s in (0, 1, 2, 3)] == ["reordered", "reordered", "resync", "new"]  # sender restarted
    assert f.classify(3 + 2**20) == ("resync", 0)  # a jump no loss explains


def test_a_sender_restarted_soon_after_start_resyncs_after_16_older_packets():
    f = SequenceFilter()  # resync_after 16, window 128
    assert all(f.classify(seq)[0] == "new" for seq in range(100))
    # the sender restarts at 0: its numbers 0..99 were all seen, yet they are older packets in a row
    verdicts = [f.classify(seq)[0] for seq in range(17)]
    assert verdicts == ["duplicate"] * 15 + ["resync", "new"]  # before the fix: 100 duplicates, then "new" at 100
    assert f.newest == 16
    f.classify(20)
    assert f.classify(18) == ("reordered", 0) and f.classify(18) == ("duplicate", 0)  # a new packet ends the run
    assert f._older_run == 2


def test_protocol_and_network_import_no_torch():
    code = "import sys, robopt.sim2real.protocol, robopt.sim2real.network; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)

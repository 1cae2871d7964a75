"""Standard CANopen tools against the emulated CiA 402 drives, as on a rig.

The drives run in another process (``hil emulate rig_canopen`` on the ``hilrig_zmq``
bus); the master is the ``canopen`` package with the EDS that ``hil canopen eds``
writes, relying on the drives' defaults (no PDO remapping, no SYNC). The EDS is checked
against the rules of CiA 306; the CiA 301/402 conformance details are checked over the
bus; ``canopen``'s own reset idiom hears every boot-up and the event timers keep time;
``python -m can.logger`` records the exchange.
"""
import configparser
import re
import signal
import subprocess
import sys
import threading
import time
import uuid

import can
import canopen
import numpy as np
import pytest
from canopen.profiles.p402 import BaseNode402
from canopen.sdo import SdoAbortedError, SdoCommunicationError
from hilrig.drivers import cia402
from hilrig.cli.main import main as hil_main
from rt_helpers import ROOT, hil, read_complete, wait_for

# -- a strict EDS check (CiA 306 V1.3, section 4.6) ---------------------------------------
DATA_TYPE_BITS = {0x0001: 1, 0x0002: 8, 0x0003: 16, 0x0004: 32, 0x0005: 8, 0x0006: 16,
                  0x0007: 32, 0x0008: 32, 0x0009: None, 0x000A: None, 0x000F: None}
ACCESS_TYPES = {"ro", "wo", "rw", "rwr", "rww", "const"}
FILE_INFO_KEYS = ("FileName", "FileVersion", "FileRevision", "EDSVersion", "Description",
                  "CreationTime", "CreationDate", "CreatedBy", "ModificationTime",
                  "ModificationDate", "ModifiedBy")
DEVICE_INFO_KEYS = ("VendorName", "VendorNumber", "ProductName", "ProductNumber",
                    "RevisionNumber", "OrderCode", "SimpleBootUpMaster", "SimpleBootUpSlave",
                    "Granularity", "DynamicChannelsSupported", "GroupMessaging", "NrOfRXPDO",
                    "NrOfTXPDO", "LSS_Supported") + tuple(
    f"BaudRate_{rate}" for rate in (10, 20, 50, 125, 250, 500, 800, 1000))


def _int(text: str, node_id: int) -> int:
    text = text.strip()
    if "$NODEID" in text:
        return int(re.sub(r"\+?\$NODEID\+?", "", text), 0) + node_id
    return int(text, 0)


def strict_eds_problems(text: str, node_id: int) -> list[str]:
    """Every violation of the CiA 306 rules below in an EDS (empty when it conforms)."""
    eds = configparser.RawConfigParser()
    eds.optionxform = str
    eds.read_string(text)
    problems = []
    for section, keys in (("FileInfo", FILE_INFO_KEYS), ("DeviceInfo", DEVICE_INFO_KEYS)):
        for key in keys:
            if not eds.has_option(section, key):
                problems.append(f"[{section}] lacks {key}")
    if not re.fullmatch(r"\d\d:\d\d(AM|PM)", eds.get("FileInfo", "CreationTime", fallback="")):
        problems.append("CreationTime is not hh:mm(AM|PM)")
    if not re.fullmatch(r"\d\d-\d\d-\d{4}", eds.get("FileInfo", "CreationDate", fallback="")):
        problems.append("CreationDate is not mm-dd-yyyy")
    if not 0 <= eds.getint("DeviceInfo", "Granularity", fallback=-1) <= 64:
        problems.append("Granularity not 0..64")
    listed = {}
    for group in ("MandatoryObjects", "OptionalObjects", "ManufacturerObjects"):
        if not eds.has_section(group):
            problems.append(f"no [{group}]")
            continue
        count = eds.getint(group, "SupportedObjects")
        keys = [k for k in eds.options(group) if k != "SupportedObjects"]
        if sorted(keys, key=int) != [str(i) for i in range(1, count + 1)]:
            problems.append(f"[{group}] entries are not 1..{count}")
        for k in keys:
            index = int(eds.get(group, k), 0)
            if index in listed:
                problems.append(f"0x{index:04X} listed twice")
            listed[index] = group
    for index, group in listed.items():
        expected = ("MandatoryObjects" if index in (0x1000, 0x1001, 0x1018) else
                    "ManufacturerObjects" if 0x2000 <= index < 0x6000 else "OptionalObjects")
        if group != expected:
            problems.append(f"0x{index:04X} in [{group}], belongs in [{expected}]")
    for index in (0x1000, 0x1001, 0x1018):
        if index not in listed:
            problems.append(f"mandatory object 0x{index:04X} missing")
    objects = {int(s, 16) for s in eds.sections() if re.fullmatch(r"[0-9A-F]{4}", s)}
    if objects != set(listed):
        problems.append(f"object sections and lists differ: {sorted(objects ^ set(listed))}")
    rx = sum(1 for i in objects if 0x1400 <= i < 0x1600)
    tx = sum(1 for i in objects if 0x1800 <= i < 0x1A00)
    if (eds.getint("DeviceInfo", "NrOfRXPDO", fallback=-1),
            eds.getint("DeviceInfo", "NrOfTXPDO", fallback=-1)) != (rx, tx):
        problems.append(f"NrOfRXPDO/NrOfTXPDO do not count the PDO objects ({rx}, {tx})")

    def check_variable(section):
        for key in ("ParameterName", "ObjectType", "DataType", "AccessType", "PDOMapping"):
            if not eds.has_option(section, key):
                problems.append(f"[{section}] lacks {key}")
                return
        data_type = int(eds.get(section, "DataType"), 0)
        access = eds.get(section, "AccessType").lower()
        if data_type not in DATA_TYPE_BITS:
            problems.append(f"[{section}] DataType 0x{data_type:04X} unknown")
        if access not in ACCESS_TYPES:
            problems.append(f"[{section}] AccessType {access!r}")
        if eds.get(section, "PDOMapping") not in ("0", "1"):
            problems.append(f"[{section}] PDOMapping {eds.get(section, 'PDOMapping')!r} "
                            "is not 0 or 1")
        bits = DATA_TYPE_BITS.get(data_type)
        if bits and eds.has_option(section, "DefaultValue"):
            value = _int(eds.get(section, "DefaultValue"), node_id)
            signed = data_type in (0x0002, 0x0003, 0x0004)
            low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            if not low <= value <= high:
                problems.append(f"[{section}] DefaultValue {value} outside its data type")
        if eds.get(section, "PDOMapping") == "1" and access in ("const",):
            problems.append(f"[{section}] a constant cannot be mapped")

    for index in sorted(objects):
        section = f"{index:04X}"
        kind = int(eds.get(section, "ObjectType", fallback="0x7"), 0)
        if kind == 0x7:
            check_variable(section)
            continue
        if kind not in (0x8, 0x9):
            problems.append(f"[{section}] ObjectType 0x{kind:X}")
            continue
        subs = [s for s in eds.sections() if s.startswith(section + "sub")]
        if int(eds.get(section, "SubNumber"), 0) != len(subs):
            problems.append(f"[{section}] SubNumber does not count its sub-indices")
        if f"{section}sub0" not in subs:
            problems.append(f"[{section}] has no sub-index 0")
        for sub in subs:
            check_variable(sub)
    return problems


def mappable(eds_text: str) -> set[int]:
    eds = configparser.RawConfigParser()
    eds.optionxform = str
    eds.read_string(eds_text)
    return {int(s, 16) for s in eds.sections() if re.fullmatch(r"[0-9A-F]{4}", s)
            and eds.get(s, "PDOMapping", fallback="0") == "1"}


@pytest.fixture(scope="module")
def eds_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("eds") / "drive.eds"
    assert hil_main(["canopen", "eds", "--node", "1", "-o", str(path)]) == 0
    return path


def test_the_eds_passes_a_strict_cia306_check_and_loads_in_canopen(eds_path):
    text = eds_path.read_text()
    assert strict_eds_problems(text, 1) == []
    assert {0x6040, 0x6071, 0x6060, 0x6041, 0x6064, 0x606C, 0x6077, 0x6078,
            0x6061} <= mappable(text)
    assert {0x1000, 0x1018, 0x6076, 0x6502} & mappable(text) == set()
    for node_id in (1, 3):
        d = canopen.import_od(str(eds_path), node_id)
        assert d[0x1800][1].default == 0x180 + node_id          # $NODEID+0x180
        assert d[0x1402][1].default == 0x80000400 + node_id     # RPDO3 off
        assert d[0x1017].default == 100                         # heartbeat_period 0.1 s
        assert d[0x1800][2].default == 255 and d[0x1800][5].default == 10
        # the default mapping, each entry a mappable object of the right size
        for mapping in (0x1600, 0x1A00, 0x1A01):
            for sub in range(1, d[mapping][0].default + 1):
                entry = d[mapping][sub].default
                obj = d[entry >> 16]
                assert obj.pdo_mappable and len(obj) == entry & 0xFF
        assert [d[0x1A00][s].default >> 16 for s in (1, 2)] == [0x6041, 0x6064]
        assert [d[0x1A01][s].default >> 16 for s in (1, 2)] == [0x606C, 0x6077]
        assert [d[0x1600][s].default >> 16 for s in (1, 2)] == [0x6040, 0x6071]


def test_the_strict_check_rejects_what_it_should():
    from hilrig.settings.config import load
    from hilrig.drivers.cia402_eds import eds_text
    text = eds_text(load("rig_canopen"), 1)
    assert strict_eds_problems(text.replace("PDOMapping=1", "PDOMapping=0x1"), 1)
    assert strict_eds_problems(text.replace("Granularity=8\n", ""), 1)
    assert strict_eds_problems(text.replace("[ManufacturerObjects]\nSupportedObjects=0\n", ""), 1)


def test_hil_canopen_eds_refuses_an_unknown_node_in_one_line(capsys):
    assert hil_main(["canopen", "eds", "--node", "9"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]     # after any compile progress
    assert last == "hil: config error: --node 9: not a drive of this config " \
                   "(link.canopen.node_ids = [1, 2, 3])"


# -- the drives in another process --------------------------------------------------------

@pytest.fixture(scope="module")
def channel():
    return f"ipc:///tmp/hil-cia-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def drives(channel, tmp_path_factory):
    """``hil emulate rig_canopen`` on its own hilrig_zmq channel, until the module ends."""
    stderr = tmp_path_factory.mktemp("drives") / "stderr.txt"
    with open(stderr, "w") as err:
        proc = subprocess.Popen(hil("emulate", "rig_canopen", "--set",
                                    f"link.canopen.channel='{channel}'", "--duration", "600"),
                                cwd=ROOT, stdout=subprocess.PIPE, stderr=err, text=True)
    banner = proc.stdout.readline()
    assert banner.startswith("emulating"), banner + stderr.read_text()
    yield proc
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=30)


@pytest.fixture
def network(drives, channel):
    net = canopen.Network()
    deadline = time.monotonic() + 120
    while True:
        try:
            net.connect(interface="hilrig_zmq", channel=channel, connect_timeout=2.0)
            break
        except can.CanInitializationError:
            if time.monotonic() > deadline or drives.poll() is not None:
                raise
    yield net
    net.disconnect()


def _boot(net, node_id, eds=None):
    """NMT reset node; the node once it booted (a BaseNode402 if ``eds`` is given)."""
    node = BaseNode402(node_id, str(eds)) if eds else \
        canopen.RemoteNode(node_id, cia402.object_dictionary(node_id))
    net.add_node(node)
    node.sdo.RESPONSE_TIMEOUT = 1.0
    booted = threading.Event()
    net.subscribe(0x700 + node_id, lambda cob_id, data, ts: data[0] == 0 and booted.set())
    node.nmt.send_command(cia402.NMT_RESET_NODE)
    assert booted.wait(10), f"no boot-up from node {node_id}"
    return node


@pytest.mark.system
def test_base_node_402_drives_a_node_from_boot_to_motion_with_default_pdos(network, eds_path):
    started = time.monotonic()
    node = _boot(network, 1, eds_path)
    assert node.nmt.wait_for_heartbeat(1.0) == "PRE-OPERATIONAL"     # 0x1017 = 100 ms
    node.setup_402_state_machine()                 # reads the PDO configuration, no remapping
    assert node.tpdo[1].trans_type == 255 and node.tpdo[1].event_timer == 10
    node.op_mode = "CYCLIC SYNCHRONOUS TORQUE"
    assert node.sdo[0x6061].raw == cia402.MODE_CST
    node.nmt.state = "OPERATIONAL"
    node.state = "OPERATION ENABLED"                # through the state machine, over RPDO1
    enabled = time.monotonic() - started
    print(f"boot to OPERATION ENABLED with BaseNode402: {enabled * 1e3:.0f} ms")
    assert node.state == "OPERATION ENABLED"
    q0 = node.tpdo_values[0x6064]
    node.rpdo[1]["Target torque"].raw = 300          # per-mille of the rated torque
    node.rpdo[1].transmit()                          # no SYNC anywhere
    enough = 4096 * 10 * 0.05 / (2 * 3.14159)        # 0.05 rad of joint 1, in counts
    deadline = time.monotonic() + 30.0               # (0.5 s on a quiet machine)
    while node.tpdo_values[0x6064] - q0 <= enough and time.monotonic() < deadline:
        node.tpdo[1].wait_for_reception(1.0)
    moved = node.tpdo_values[0x6064] - q0
    assert moved > enough                            # joint 1 moved forward
    assert node.tpdo_values[0x606C] != 0 and node.tpdo_values[0x6077] == 300
    node.state = "SWITCH ON DISABLED"
    node.nmt.state = "PRE-OPERATIONAL"


@pytest.mark.system
def test_sdo_conformance_sub_index_mode_and_identity(network):
    node = _boot(network, 2)
    with pytest.raises(SdoAbortedError) as abort:
        node.sdo.upload(0x6064, 1)
    assert abort.value.code == 0x06090011           # sub-index does not exist
    with pytest.raises(SdoAbortedError) as abort:
        node.sdo[0x6060].raw = 1                     # profile position: not in 0x6502
    assert abort.value.code == 0x06090030
    assert node.sdo[0x6061].raw == 0
    node.sdo[0x6060].raw = cia402.MODE_CST
    assert node.sdo[0x6061].raw == cia402.MODE_CST
    assert node.sdo[0x6502].raw == 1 << 9
    assert node.sdo[0x1000].raw == 0x00020192 and node.sdo[0x1001].raw == 0
    assert [node.sdo[0x1018][s].raw for s in (1, 2, 4)] == [0, 0x402, 2]
    assert node.sdo[0x1008].raw == "hilrig emulated CiA 402 drive"     # segmented upload
    assert node.sdo[0x1009].raw and node.sdo[0x100A].raw
    assert node.sdo[0x605A].raw == 2 and node.sdo[0x6073].raw == 5000
    assert node.sdo[0x1003][0].raw == 0


@pytest.mark.system
def test_block_upload_is_refused_with_the_standard_abort(network):
    node = _boot(network, 2)
    with pytest.raises(SdoAbortedError) as abort:
        node.sdo.open(0x1008, 0, "rb", block_transfer=True).read()
    assert abort.value.code == 0x05040001             # command specifier not valid
    assert node.sdo[0x1008].raw == "hilrig emulated CiA 402 drive"   # the server goes on


@pytest.mark.system
def test_no_sdo_in_nmt_stopped(network):
    node = _boot(network, 3)
    node.nmt.state = "STOPPED"
    states = [node.nmt.wait_for_heartbeat(1.0) for _ in range(3)]
    assert states[-1] == "STOPPED"
    node.sdo.RESPONSE_TIMEOUT = 0.3
    with pytest.raises(SdoCommunicationError):
        node.sdo[0x1000].raw
    node.nmt.state = "PRE-OPERATIONAL"
    assert node.sdo[0x1000].raw == 0x00020192


@pytest.mark.system
def test_a_fault_fills_the_error_objects(network):
    """The heartbeat consumer trips (0x8130): EMCY, 0x1001, 0x1003, 0x603F; 0x1003 clears."""
    node = _boot(network, 2)
    node.sdo[0x1016][1].raw = 0x7F << 16 | 50        # the master (127) consumed, 50 ms
    network.send_message(0x700 + 0x7F, [0x05])       # one heartbeat, then silence
    node.emcy.wait(0x8130, 2.0)
    assert node.sdo[0x603F].raw == 0x8130
    assert node.sdo[0x1001].raw == 0x11               # generic + communication
    assert (node.sdo[0x1003][0].raw, node.sdo[0x1003][1].raw) == (1, 0x8130)
    with pytest.raises(SdoAbortedError) as abort:
        node.sdo[0x1003][0].raw = 1
    assert abort.value.code == 0x06090030
    node.sdo[0x1003][0].raw = 0                       # clear the history
    assert node.sdo[0x1003][0].raw == 0
    with pytest.raises(SdoAbortedError) as abort:
        node.sdo.upload(0x1003, 1)
    assert abort.value.code == 0x08000024
    node.sdo[0x1016][1].raw = 0
    node.sdo[0x6040].raw = cia402.CW_FAULT_RESET
    assert cia402.decode_state(node.sdo[0x6041].raw) == cia402.State.SWITCH_ON_DISABLED
    assert node.sdo[0x1001].raw == 0


@pytest.mark.system
def test_python_can_logger_records_the_exchange(network, channel, tmp_path):
    log = tmp_path / "bus.log"
    logger = subprocess.Popen([sys.executable, "-u", "-m", "can.logger", "-i", "hilrig_zmq",
                               "-c", channel, "-f", str(log)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = logger.stdout.readline()
        assert line.startswith("Connected to"), line + logger.stderr.read()
        node = _boot(network, 3)
        assert node.sdo[0x1000].raw == 0x00020192
        seen = {0x183: 0, 0x283: 0}                   # event-driven TPDOs on the bus
        for cob_id in seen:
            network.subscribe(cob_id, lambda cob_id, data, ts: seen.update(
                {cob_id: seen[cob_id] + 1}))
        node.nmt.state = "OPERATIONAL"
        wait_for(lambda: min(seen.values()) >= 3, 30, "three of each TPDO")
        node.nmt.state = "PRE-OPERATIONAL"
    finally:
        logger.send_signal(signal.SIGINT)
        logger.communicate(timeout=30)
    ids = [msg.arbitration_id for msg in can.LogReader(str(log))]
    assert 0x000 in ids and ids.count(0x703) >= 1                # NMT, boot-up / heartbeat
    assert 0x603 in ids and 0x583 in ids                         # SDO request and answer
    assert ids.count(0x183) >= 3 and ids.count(0x283) >= 3       # event-driven TPDOs


@pytest.mark.system
def test_canopens_reset_idiom_hears_every_boot_up_and_event_timers_keep_time():
    """``canopen``'s own bring-up idiom, ``nmt.state = 'RESET'`` then ``wait_for_bootup()``
    (which listens only after the command has gone out), hears the boot-up 20 times out of
    20: the emulated drive boots ``emulator.canopen.boot_time`` after the reset (50 ms
    here), never sooner. Then the default TPDO1's 10 ms event timer, measured on the bus
    over 2 s: median period within 10 +- 1 ms (tails: bench/bench_drive_tools.py)."""
    boot_time, channel = 0.05, f"ipc:///tmp/hil-cia-{uuid.uuid4().hex[:8]}"
    proc = subprocess.Popen(hil("emulate", "rig_canopen", "--set",
                                f"link.canopen.channel='{channel}'", "--set",
                                f"emulator.canopen.boot_time={boot_time}", "--duration", "120"),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    net = canopen.Network()
    try:
        seen = []
        for line in proc.stderr:                   # the ready line: the drives have booted
            seen.append(line)
            if "emulated CiA 402 drives" in line:
                break
        else:
            pytest.fail("hil emulate ended before its drives were ready: " + "".join(seen))
        threading.Thread(target=proc.stderr.read, daemon=True).start()   # keep the pipe drained
        net.connect(interface="hilrig_zmq", channel=channel, connect_timeout=10.0)
        node = canopen.RemoteNode(1, cia402.object_dictionary(1))
        net.add_node(node)
        boot_ups = []
        net.subscribe(0x701, lambda cob_id, data, ts: data[0] == 0 and
                      boot_ups.append(time.monotonic()))
        delays = []
        for _ in range(20):
            sent = time.monotonic()
            node.nmt.state = "RESET"
            node.nmt.wait_for_bootup(2.0)          # NmtError if the boot-up came unheard
            delays.append(boot_ups[-1] - sent)
        assert len(boot_ups) == 20
        assert min(delays) >= boot_time, delays
        print(f"boot-up after reset: {min(delays) * 1e3:.1f}..{max(delays) * 1e3:.1f} ms")

        arrivals = []
        net.subscribe(0x181, lambda cob_id, data, ts: arrivals.append(time.monotonic()))
        node.nmt.state = "OPERATIONAL"             # default PDOs: event-driven, 10 ms timer
        deadline = time.monotonic() + 60           # ~2 s of TPDOs, however busy the host
        while len(arrivals) < 202 and time.monotonic() < deadline:
            time.sleep(0.05)
        node.nmt.state = "PRE-OPERATIONAL"
        periods = np.diff(arrivals[1:])            # the first: sent at the NMT start
        assert len(periods) > 100
        assert abs(np.median(periods) - 0.010) <= 0.001, np.median(periods)
        print(f"TPDO1 event timer: median {np.median(periods) * 1e3:.3f} ms over "
              f"{len(periods)} periods")
    finally:
        net.disconnect()
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)


@pytest.mark.system
def test_hil_emulate_honours_duration_and_log_on_can(tmp_path):
    channel = f"ipc:///tmp/hil-cia-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "drives.mcap"
    proc = subprocess.Popen(hil("emulate", "rig_canopen", "--set",
                                f"link.canopen.channel='{channel}'", "--duration", "4",
                                "--log", str(log)),
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    net = canopen.Network()
    try:
        net.connect(interface="hilrig_zmq", channel=channel, connect_timeout=60.0)
        node = canopen.RemoteNode(1, cia402.object_dictionary(1))
        net.add_node(node)
        tpdos = []
        net.subscribe(0x181, lambda cob_id, data, ts: tpdos.append(ts))
        node.nmt.state = "OPERATIONAL"            # default PDOs: the plant runs freely
        deadline = time.monotonic() + 60          # its first TPDOs, however busy the host
        while len(tpdos) < 10 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(tpdos) >= 10, "the drive sent no TPDO once operational"
    finally:
        net.disconnect()
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, out + err
    assert "stopped: duration reached" in out
    arrays, events, _, summary = read_complete(log)
    assert summary["reason"] == "duration reached"
    assert len(arrays["t"]) > 50 and abs(arrays["t"][1] - arrays["t"][0] - 0.002) < 1e-9


def test_setting_only_the_zmq_interface_uses_its_default_channel_or_one_line(tmp_path):
    from hilrig.errors import ConfigError
    from hilrig.settings.config import load
    text = (ROOT / "configs" / "rig_canopen.toml").read_text()
    path = tmp_path / "zmq_only.toml"
    path.write_text(text[:text.index("[link]")]
                    + "[link]\ntype = 'canopen'\n[link.canopen]\ninterface = 'hilrig_zmq'\n")
    assert load(str(path)).link.canopen.channel == "ipc://$RUNTIME/can"
    with pytest.raises(ConfigError, match=r"^link.canopen.channel: the hilrig_zmq interface "
                                          r"takes ipc:///PATH or tcp://127.0.0.1:PORT, got "
                                          r"'can0'$"):
        load(str(path), ["link.canopen.channel=can0"])
    virtual = load(str(path), ["link.canopen.interface=virtual"])
    assert virtual.link.canopen.channel == "hilrig"

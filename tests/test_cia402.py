"""The CiA 402 profile: statusword decoding, the state machine, error texts, bus load;
and the same state machine, SDO reads and writes round-tripped through an emulated drive."""
import canopen
import pytest
from canopen.sdo.exceptions import SdoAbortedError
from hilrig.devices.cia402_drive import EmulatedDrives
from hilrig.drivers import busload, cia402
from hilrig.drivers.cia402 import State

from conftest import config

S = State

# every legal transition: (from, controlword, to, CiA 402 transition number)
LEGAL = [
    (S.SWITCH_ON_DISABLED, 0x0006, S.READY_TO_SWITCH_ON, 2),
    (S.READY_TO_SWITCH_ON, 0x0007, S.SWITCHED_ON, 3),
    (S.READY_TO_SWITCH_ON, 0x000F, S.OPERATION_ENABLED, 3),
    (S.SWITCHED_ON, 0x000F, S.OPERATION_ENABLED, 4),
    (S.OPERATION_ENABLED, 0x0007, S.SWITCHED_ON, 5),
    (S.SWITCHED_ON, 0x0006, S.READY_TO_SWITCH_ON, 6),
    (S.READY_TO_SWITCH_ON, 0x0000, S.SWITCH_ON_DISABLED, 7),
    (S.READY_TO_SWITCH_ON, 0x0002, S.SWITCH_ON_DISABLED, 7),
    (S.OPERATION_ENABLED, 0x0006, S.READY_TO_SWITCH_ON, 8),
    (S.OPERATION_ENABLED, 0x0000, S.SWITCH_ON_DISABLED, 9),
    (S.SWITCHED_ON, 0x0000, S.SWITCH_ON_DISABLED, 10),
    (S.SWITCHED_ON, 0x0002, S.SWITCH_ON_DISABLED, 10),
    (S.OPERATION_ENABLED, 0x0002, S.QUICK_STOP_ACTIVE, 11),
    (S.QUICK_STOP_ACTIVE, 0x0000, S.SWITCH_ON_DISABLED, 12),
    (S.FAULT, 0x0080, S.SWITCH_ON_DISABLED, 15),
    (S.QUICK_STOP_ACTIVE, 0x000F, S.OPERATION_ENABLED, 16),
]

# illegal commands: the drive stays where it is
ILLEGAL = [
    (S.SWITCH_ON_DISABLED, 0x000F),   # enable operation before shutdown
    (S.SWITCH_ON_DISABLED, 0x0007),   # switch on before shutdown
    (S.FAULT, 0x000F),                # enable operation while faulted
    (S.FAULT, 0x0006),
    (S.QUICK_STOP_ACTIVE, 0x0006),    # shutdown from quick stop
    (S.QUICK_STOP_ACTIVE, 0x0007),
]


@pytest.mark.parametrize("state", list(State))
def test_statusword_round_trip(state):
    assert cia402.decode_state(cia402.statusword(state)) == state


@pytest.mark.parametrize("word, state", [(0x0250, S.SWITCH_ON_DISABLED),
                                         (0x0231, S.READY_TO_SWITCH_ON),
                                         (0x0233, S.SWITCHED_ON), (0x0237, S.OPERATION_ENABLED),
                                         (0x1237, S.OPERATION_ENABLED),
                                         (0x0217, S.QUICK_STOP_ACTIVE), (0x0218, S.FAULT),
                                         (0x021F, S.FAULT_REACTION_ACTIVE),
                                         (0x0000, S.NOT_READY_TO_SWITCH_ON)])
def test_decode_documented_statuswords(word, state):
    assert cia402.decode_state(word) == state


@pytest.mark.parametrize("start, word, end, number", LEGAL)
def test_every_legal_transition(start, word, end, number):
    assert cia402.next_state(start, word) == (end, number)


@pytest.mark.parametrize("start, word", ILLEGAL)
def test_illegal_commands_are_refused(start, word):
    assert cia402.next_state(start, word) == (start, None)


def test_fault_reset_acts_on_the_rising_edge_only():
    assert cia402.next_state(S.FAULT, 0x0080, previous=0x0000) == (S.SWITCH_ON_DISABLED, 15)
    assert cia402.next_state(S.FAULT, 0x0080, previous=0x0080) == (S.FAULT, None)


def test_command_names():
    assert cia402.command_name(0x0006) == "shutdown"
    assert cia402.command_name(0x000F) == "enable operation"
    assert cia402.command_name(0x0002) == "quick stop"
    assert cia402.command_name(0x0000) == "disable voltage"
    assert cia402.command_name(0x0080) == "fault reset"


def test_error_texts_are_plain_language():
    assert "heartbeat" in cia402.describe_error(0x8130)
    assert "over-current" in cia402.describe_error(0x2310)
    assert cia402.describe_error(0x2399).startswith("current error")
    assert "unknown" in cia402.describe_error(0x0123)


def test_interpolation_period():
    assert cia402.interpolation_period(0.002) == (2, -3)
    assert cia402.interpolation_period(0.0005) == (5, -4)
    with pytest.raises(ValueError, match="no exact 0x60C2 form"):
        cia402.interpolation_period(1 / 3000)


def test_bus_load_budget():
    # SYNC 47 bits + per axis RPDO1 (4 B) 79, TPDO1 (6 B) 95, TPDO2 (6 B) 95 bits
    assert busload.cycle_bits(3, worst_case=False) == 47 + 3 * (79 + 95 + 95)
    assert busload.frame_bits(8) == 135                     # 111 + 24 stuff bits
    assert busload.bus_load(3, 0.001, 1_000_000) > 1.0      # 3 axes do not fit at 1 ms
    assert busload.bus_load(3, 0.002, 1_000_000) < 0.6
    assert busload.max_axes(0.001, 1_000_000) == 2
    assert busload.max_axes(0.001, 1_000_000, worst_case=False) == 3


# -- round trips through an emulated drive, over SDO ------------------------------------

@pytest.fixture
def drive():
    """One emulated axis (node 1 of the rig) and a bare canopen master on its bus."""
    cfg = config("rig_canopen", "link.canopen.interface='virtual'",
                 "link.canopen.channel='sdo-round-trip'")
    with EmulatedDrives(cfg) as emu:
        net = canopen.Network()
        net.NOTIFIER_CYCLE = 0.05
        net.connect(interface="virtual", channel="sdo-round-trip")
        node = net.add_node(1, cia402.object_dictionary(1))
        try:
            yield emu, node
        finally:
            net.disconnect()


def test_state_machine_over_sdo(drive):
    emu, node = drive
    sw = node.sdo[cia402.STATUSWORD]
    cw = node.sdo[cia402.CONTROLWORD]
    node.sdo[cia402.MODES_OF_OPERATION].raw = cia402.MODE_CST
    assert node.sdo[cia402.MODES_DISPLAY].raw == cia402.MODE_CST
    assert sw.raw == 0x0250
    cw.raw = 0x000F                                   # illegal from SWITCH ON DISABLED
    assert cia402.decode_state(sw.raw) == S.SWITCH_ON_DISABLED
    for word, expected in [(0x0006, 0x0231), (0x0007, 0x0233), (0x000F, 0x1237),
                           (0x0002, 0x0217), (0x000F, 0x1237), (0x0007, 0x0233),
                           (0x0006, 0x0231), (0x0000, 0x0250)]:
        cw.raw = word
        assert sw.raw == expected, f"after controlword 0x{word:04X}"
    emu.inject_fault(1, 0x4310)
    assert cia402.decode_state(sw.raw) == S.FAULT
    assert node.sdo[cia402.ERROR_CODE].raw == 0x4310
    cw.raw = 0x000F                                   # refused while faulted
    assert cia402.decode_state(sw.raw) == S.FAULT
    cw.raw = 0x0080                                   # fault reset, rising edge
    assert sw.raw == 0x0250 and node.sdo[cia402.ERROR_CODE].raw == 0


def test_sdo_reads_writes_and_aborts(drive):
    _, node = drive
    assert node.sdo[cia402.DEVICE_TYPE].raw == cia402.DEVICE_TYPE_SERVO
    node.sdo[cia402.MAX_TORQUE].raw = 1234
    assert node.sdo[cia402.MAX_TORQUE].raw == 1234
    node.sdo[cia402.HEARTBEAT_CONSUMER][1].raw = 127 << 16 | 300
    assert node.sdo[cia402.HEARTBEAT_CONSUMER][1].raw == 127 << 16 | 300
    with pytest.raises(SdoAbortedError) as read_only:
        node.sdo[cia402.STATUSWORD].raw = 0
    assert read_only.value.code == 0x06010002
    with pytest.raises(SdoAbortedError) as absent:
        node.sdo.upload(0x2000, 0)
    assert absent.value.code == 0x06020000

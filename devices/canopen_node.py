"""A CANopen slave node (CiA 301) as a real device answers: ``canopen.LocalNode`` made strict.

What ``canopen.LocalNode`` leaves loose and a conforming device does not:

- an SDO access to a sub-index that an object does not have is aborted with 0x06090011
  (LocalNode answers the value of a plain variable for any sub-index, e.g. 0x6064:01);
- in NMT STOPPED the node serves no SDO (only NMT and heartbeat);
- SDO block transfers, which this node does not implement, are refused with abort
  0x05040001 (command specifier not valid), except that an upload whose data fits the
  client's protocol switch threshold is switched to a normal upload, as CiA 301 allows
  (LocalNode answered a block request with a normal upload response, which a client
  that asked for no switch, such as ``canopen``'s, cannot read);
- the pre-defined error field 0x1003: ``push_error(code)`` records an error (newest at
  sub-index 1, at most ``depth``); writing 0 to sub-index 0 clears it, any other value is
  refused with 0x06090030; reading a sub-index beyond the number of errors is aborted
  with 0x08000024 (no data available);
- from an NMT reset until its boot-up frame the node is INITIALISING and off the bus: no
  heartbeat, no SDO answer, and NMT commands are ignored (``DriveNmtSlave``); whoever
  runs the node ends the boot (``boot``) when its boot time is over.
"""
from __future__ import annotations

import struct

import canopen
from canopen.nmt import NmtSlave
from canopen.objectdictionary import ODVariable
from canopen.sdo import SdoAbortedError, SdoServer

ABORT_COMMAND_SPECIFIER = 0x05040001
ABORT_NO_SUBINDEX = 0x06090011
ABORT_VALUE_RANGE = 0x06090030
ABORT_NO_DATA = 0x08000024
ERROR_HISTORY = 0x1003
_RESETS = (0x81, 0x82)          # NMT reset node, reset communication
_INITIALISING, _PRE_OPERATIONAL = 0, 127      # NMT states (canopen.nmt.NMT_STATES)


class DriveNmtSlave(NmtSlave):
    """The NMT slave of a ``DriveNode``: a reset takes the node off the bus until ``boot``.

    A reset command stops the heartbeat and leaves the node INITIALISING without a
    frame (``canopen.NmtSlave`` would keep its heartbeat task running with state 0,
    which a master cannot tell from a boot-up); while INITIALISING every NMT command is
    ignored, as a rebooting device hears none.
    """

    def on_command(self, can_id, data, timestamp):
        if self._state == _INITIALISING or len(data) < 2 or data[1] not in (0, self.id):
            return
        if data[0] in _RESETS:
            self.stop_heartbeat()
        super().on_command(can_id, data, timestamp)

    def boot(self) -> None:
        """End the boot: send the boot-up frame and enter PRE-OPERATIONAL.

        The heartbeat is not started: the boot-up is the first heartbeat, so the next
        is due one producer time (0x1017) later, when the owner calls
        ``start_heartbeat`` (``canopen.NmtSlave`` sent one at once, which a master
        waiting for the boot-up, ``canopen``'s ``wait_for_bootup``, can take for the
        news and so miss the boot-up a tenth of a millisecond before it).
        """
        self._state = _PRE_OPERATIONAL      # first: a master's SDO may follow at once
        self.network.send_message(0x700 + self.id, [_INITIALISING])


class StrictSdoServer(SdoServer):
    """The SDO server of a ``DriveNode``: silent in STOPPED, while booting and while the
    node is off the bus (``sdo_silent``: bus-off), refuses block transfers."""

    def on_request(self, can_id, data, timestamp):
        if self._node.nmt.state in ("STOPPED", "INITIALISING") or self._node.sdo_silent:
            return
        super().on_request(can_id, data, timestamp)

    def block_upload(self, data):
        _, index, subindex, _, threshold = struct.unpack_from("<BHBBB", data)
        self._index, self._subindex = index, subindex
        if threshold and len(self._node.get_data(index, subindex, check_readable=True)) \
                <= threshold:
            self.init_upload(data)          # protocol switch to a normal upload
            return
        self.abort(ABORT_COMMAND_SPECIFIER)

    def block_download(self, data):
        _, index, subindex = struct.unpack_from("<BHB", data)
        self._index, self._subindex = index, subindex
        self.abort(ABORT_COMMAND_SPECIFIER)


class DriveNode(canopen.LocalNode):
    """A ``canopen.LocalNode`` with the CiA 301 behaviour of the module docstring.

    Args:
        node_id: 1..127.
        object_dictionary: the node's dictionary; if it has 0x1003, its error history
            is served from ``errors``.
    """

    def __init__(self, node_id: int, object_dictionary):
        super().__init__(node_id, object_dictionary)
        self.sdo = StrictSdoServer(0x600 + self.id, 0x580 + self.id, self)
        self._write_callbacks.remove(self.nmt.on_write)    # LocalNode's NmtSlave, replaced
        self.nmt = DriveNmtSlave(self.id, self)
        self.add_write_callback(self.nmt.on_write)          # 0x1017: the heartbeat period
        self.errors: list[int] = []                 # 0x1003, newest first
        self.sdo_silent = False                     # off the bus (bus-off): no SDO answer
        self.error_depth = 0
        if ERROR_HISTORY in self.object_dictionary:
            self.error_depth = len(self.object_dictionary[ERROR_HISTORY]) - 1

    def push_error(self, code: int, info: int = 0) -> None:
        """Record an error in 0x1003: error code (bits 0..15) and additional info (16..31)."""
        if self.error_depth:
            self.errors.insert(0, (code & 0xFFFF) | (info & 0xFFFF) << 16)
            del self.errors[self.error_depth:]

    def _find_object(self, index, subindex):
        obj = super()._find_object(index, subindex)
        if isinstance(obj, ODVariable) and obj.parent is self.object_dictionary and subindex:
            raise SdoAbortedError(ABORT_NO_SUBINDEX)
        return obj

    def get_data(self, index: int, subindex: int, check_readable: bool = False) -> bytes:
        if index == ERROR_HISTORY and self.error_depth:
            obj = self._find_object(index, subindex)
            if subindex == 0:
                return obj.encode_raw(len(self.errors))
            if subindex > len(self.errors):
                raise SdoAbortedError(ABORT_NO_DATA)
            return obj.encode_raw(self.errors[subindex - 1])
        return super().get_data(index, subindex, check_readable)

    def set_data(self, index: int, subindex: int, data: bytes,
                 check_writable: bool = False) -> None:
        if index == ERROR_HISTORY and self.error_depth and subindex == 0:
            self._find_object(index, subindex)
            if len(data) != 1:
                raise SdoAbortedError(0x06070010)
            if data[0] != 0:
                raise SdoAbortedError(ABORT_VALUE_RANGE)
            self.errors.clear()
            return
        super().set_data(index, subindex, data, check_writable)

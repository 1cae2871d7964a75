"""Links between a controller and a plant: in-process, ZeroMQ emulator, CANopen, serial."""

"""pyuvm environment for the whole SoC: register, command-queue and completion agents, a DeviceModel scoreboard."""

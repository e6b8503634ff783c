"""The emulated accelerator: machine presets, values (emulate) and time (cost)."""

# The game's speed-up: one setting, time_scale, moves the engine's clocks together so a
# game trains faster than real time with its physics unchanged. Engine.time_scale makes
# game time pass x times faster, Engine.physics_ticks_per_second runs x times more
# ticks (each still the project's step, so physics stays as stable as at 1x), and
# Engine.max_physics_steps_per_frame lets a frame run them all (else the engine drops
# ticks past 8 per frame and the game falls behind the clock).
extends RefCounted


# Apply a time scale (1.0: the project's own settings, real time).
static func apply(time_scale: float) -> void:
	var ticks := int(ProjectSettings.get_setting("physics/common/physics_ticks_per_second", 60))
	var steps := int(ProjectSettings.get_setting("physics/common/max_physics_steps_per_frame", 8))
	Engine.time_scale = time_scale
	Engine.physics_ticks_per_second = maxi(1, int(round(ticks * time_scale)))
	Engine.max_physics_steps_per_frame = maxi(steps, int(ceil(steps * time_scale)))

# The game side of a masked task: the usual hooks plus get_action_mask(), the items that
# may be picked now (masked_pick_env.gd). Every action the agent hands set_action() is
# one the mask allows, in thin and local mode alike; in heuristic mode the scripted
# picker takes the most valuable allowed item (with record_demos_path: a demonstrations
# file whose every step carries its mask). Ported from the Godot 3 example.
extends "res://addons/rllink/rllink_agent.gd"

const MaskedPickEnv = preload("res://masked_pick_env.gd")

var env = MaskedPickEnv.new()
var _reward := 0.0
var _truncated := false


func get_obs() -> Array:
	return env.observation()


func get_action_mask() -> Array:
	return env.mask


func set_action(action) -> void:
	var result: Dictionary = env.step(action)
	_reward += result.reward
	_truncated = result.truncated


func get_reward() -> float:
	var reward := _reward
	_reward = 0.0
	return reward


func is_truncated() -> bool:
	return _truncated


func reset() -> void:
	env.reset()
	_reward = 0.0
	_truncated = false


# heuristic mode: a scripted picker standing in for a player.
func get_heuristic_action():
	return env.best_allowed()

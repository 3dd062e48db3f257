# The game side of training: a cart-pole as an RLlinkAgent. The hooks are all a game
# writes; the agent node (addons/rllink) does the protocol, the episode loop and the
# reconnects. CartPole's physics is plain math (cartpole_env.gd), so set_action steps
# it at once; a game with Godot physics would store the action and apply forces in
# its own _physics_process instead.
extends "res://addons/rllink/rllink_agent.gd"

const CartPoleEnv = preload("res://cartpole_env.gd")

var env = CartPoleEnv.new()
var _reward = 0.0
var _terminated = false
var _truncated = false


func get_obs() -> Array:
	return env.observation()


func set_action(action) -> void:
	var result = env.step(action)
	_reward += result.reward
	_terminated = result.terminated
	_truncated = result.truncated


func get_reward() -> float:
	var reward = _reward
	_reward = 0.0
	return reward


func is_done() -> bool:
	return _terminated


func is_truncated() -> bool:
	return _truncated  # CartPole-v1's TimeLimit: 500 steps


func reset() -> void:
	env.reset()
	_reward = 0.0
	_terminated = false
	_truncated = false


# heuristic mode: a hand-written controller (push toward where the pole is falling),
# standing in for a human at the keyboard; it balances for the full 500 steps.
func get_heuristic_action():
	var state = env.state
	return 1 if state[2] + 0.5 * state[3] > 0.0 else 0

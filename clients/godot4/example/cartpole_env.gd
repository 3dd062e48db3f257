# Gymnasium's CartPole-v1 in GDScript, step for step: the same constants, Euler
# integration, termination thresholds, reward (1 per step, the terminal step included)
# and TimeLimit of 500 steps as gymnasium.envs.classic_control.CartPoleEnv (and the
# Godot 3 example's cartpole_env.gd). GDScript floats are doubles, like gymnasium's state.
extends RefCounted

const GRAVITY = 9.8
const MASS_CART = 1.0
const MASS_POLE = 0.1
const TOTAL_MASS = MASS_POLE + MASS_CART
const LENGTH = 0.5  # half the pole's length
const POLE_MASS_LENGTH = MASS_POLE * LENGTH
const FORCE_MAG = 10.0
const TAU_SECONDS = 0.02  # seconds per step (gymnasium: tau)
const THETA_THRESHOLD = 12.0 * 2.0 * PI / 360.0
const X_THRESHOLD = 2.4
const MAX_EPISODE_STEPS = 500

var state: Array = [0.0, 0.0, 0.0, 0.0]  # x, x_dot, theta, theta_dot
var steps := 0
var rng := RandomNumberGenerator.new()


func _init(seed_value := 0) -> void:
	rng.seed = seed_value


# A new episode from uniform(-0.05, 0.05) in each state variable; the observation.
func reset() -> Array:
	state = []
	for _i in range(4):
		state.append(rng.randf_range(-0.05, 0.05))
	steps = 0
	return observation()


func observation() -> Array:
	return state.duplicate()


# Push left (0) or right (1): {"reward", "terminated", "truncated"}.
func step(action: int) -> Dictionary:
	var x: float = state[0]
	var x_dot: float = state[1]
	var theta: float = state[2]
	var theta_dot: float = state[3]
	var force := FORCE_MAG if action == 1 else -FORCE_MAG
	var cos_theta := cos(theta)
	var sin_theta := sin(theta)
	var temp := (force + POLE_MASS_LENGTH * (theta_dot * theta_dot) * sin_theta) / TOTAL_MASS
	var theta_acc := (
		(GRAVITY * sin_theta - cos_theta * temp)
		/ (LENGTH * (4.0 / 3.0 - (MASS_POLE * (cos_theta * cos_theta)) / TOTAL_MASS))
	)
	var x_acc := temp - (POLE_MASS_LENGTH * theta_acc * cos_theta) / TOTAL_MASS
	x += TAU_SECONDS * x_dot
	x_dot += TAU_SECONDS * x_acc
	theta += TAU_SECONDS * theta_dot
	theta_dot += TAU_SECONDS * theta_acc
	state = [x, x_dot, theta, theta_dot]
	steps += 1
	var terminated := (
		x < -X_THRESHOLD or x > X_THRESHOLD or theta < -THETA_THRESHOLD or theta > THETA_THRESHOLD
	)
	return {"reward": 1.0, "terminated": terminated, "truncated": steps >= MAX_EPISODE_STEPS}

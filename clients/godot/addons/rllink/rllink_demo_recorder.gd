# Demonstrations: the episodes the game plays itself (inference "heuristic": a human, a
# script), written as RLlink episode chunks, one JSON object a line: the file a gateway's
# `demos` setting pre-trains a policy on by behavioural cloning (docs/training.md,
# "Demonstrations"; the gateway's loader is app/training/demos.py). No gateway is needed.
# The Godot 4 kit's rllink_demo_recorder.gd in GDScript 1.0.
#
# A line holds one whole episode: obs (T+1: the last is the one the episode ended on),
# actions (T), rewards (T: what each action earned), is_terminated, is_truncated,
# action_mask (T rows, only when the game masked a step; a step it did not mask is
# written as all allowed), agent_id and module_id when set, and a fresh episode_id. Each
# episode is appended when it ends, the file opened and closed around it (Godot 3.2's
# File has no flush): a game that quits loses at most the episode it was playing. A new
# or empty file gets a header line first; sessions of play add up (delete it to start
# over). Numbers as the kit writes them on the wire (rllink_json.gd).
extends Reference

const JsonWriter = preload("res://addons/rllink/rllink_json.gd")
const HEADER = "# rllink demonstrations: RLlink episode chunks, one JSON object a line (docs/training.md)"

var path = ""
var agent_id = ""          # written on each episode when set
var module_id = ""
var episodes = 0           # written so far
var steps = 0
var error_message = ""     # why the file cannot be written ("" while it can)

var _obs = []
var _actions = []
var _rewards = []
var _masks = []
var _mask_width = 0
var _crypto = Crypto.new()


# file_path: user:// or an absolute path. Writes the header (or checks the file can be
# appended to) at once: error_message says why not.
func _init(file_path: String) -> void:
	path = file_path
	if path == "":
		error_message = "a demonstrations file needs a path"
		return
	_append("")


func is_open() -> bool:
	return error_message == ""


# One decision: the observation, the action chosen on it (as set_action() takes it) and
# the mask it was chosen under (empty: all allowed). The first step starts an episode.
func step(obs, action, mask := []) -> void:
	_obs.append(Array(obs).duplicate())
	_actions.append(action.duplicate() if typeof(action) == TYPE_ARRAY else action)
	_rewards.append(0.0)
	if not mask.empty():
		_mask_width = mask.size()
	_masks.append(Array(mask).duplicate())


# Reward for the last step (added up); before an episode's first step it is dropped.
func add_reward(reward: float) -> void:
	if not _rewards.empty():
		_rewards[_rewards.size() - 1] += reward


# The episode is over: final_obs is the one it ended on. Appends it as one line; an
# episode with no step writes nothing. False when the file could not be written.
func end_episode(final_obs, terminated: bool, truncated: bool) -> bool:
	if _actions.empty() or error_message != "":
		_clear()
		return error_message == ""
	var chunk = {}
	if agent_id != "":
		chunk["agent_id"] = agent_id
	if module_id != "":
		chunk["module_id"] = module_id
	chunk["episode_id"] = _crypto.generate_random_bytes(16).hex_encode()
	chunk["obs"] = _obs + [Array(final_obs).duplicate()]
	chunk["actions"] = _actions
	chunk["rewards"] = _rewards
	chunk["is_terminated"] = terminated
	chunk["is_truncated"] = truncated
	if _mask_width > 0:
		chunk["action_mask"] = _full_masks()
	var written = _append(JsonWriter.write(chunk))
	if written:
		episodes += 1
		steps += _actions.size()
	_clear()
	return written


# An episode not ended is not written.
func close() -> void:
	_clear()


# Opens the file for appending (a new or empty one gets the header), adds line (if any)
# and closes it; false, with error_message, when it cannot.
func _append(line: String) -> bool:
	var file = File.new()
	var error = file.open(path, File.READ_WRITE if file.file_exists(path) else File.WRITE)
	if error != OK:
		error_message = "cannot record demonstrations to %s: Godot error %d" % [path, error]
		return false
	file.seek_end()
	if file.get_len() == 0:
		file.store_line(HEADER)
	if line != "":
		file.store_line(line)
	file.close()
	return true


# Every step's mask, an unmasked step's as all allowed.
func _full_masks() -> Array:
	var rows = []
	for mask in _masks:
		if mask.empty():
			var ones = []
			for _i in range(_mask_width):
				ones.append(1)
			rows.append(ones)
		else:
			rows.append(mask)
	return rows


func _clear() -> void:
	_obs = []
	_actions = []
	_rewards = []
	_masks = []
	_mask_width = 0

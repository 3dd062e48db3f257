# Demonstrations: the episodes the game plays itself (inference "heuristic": a human, a
# script), written as RLlink episode chunks, one JSON object a line: the file a gateway's
# `demos` setting pre-trains a policy on by behavioural cloning (docs/training.md,
# "Demonstrations"; the gateway's loader is app/training/demos.py). No gateway is needed.
#
# A line holds one whole episode: obs (T+1: the last is the one the episode ended on),
# actions (T), rewards (T: what each action earned), is_terminated, is_truncated,
# action_mask (T rows, only when the game masked a step; a step it did not mask is
# written as all allowed), agent_id and module_id when set, and a fresh episode_id. Each
# line is written and flushed when its episode ends. The file is appended to (a header
# line first when it is new or empty): sessions of play add up; delete it to start over.
# Numbers are written as the kit writes them on the wire (rllink_json.gd: ints stay ints,
# floats with 9 significant digits).
extends RefCounted

const JsonWriter = preload("res://addons/rllink/rllink_json.gd")

const HEADER = (
	"# rllink demonstrations: RLlink episode chunks, one JSON object a line"
	+ " (docs/training.md)"
)

var path := ""
var agent_id := ""  # written on each episode when set
var module_id := ""
var episodes := 0  # written so far
var steps := 0
var error_message := ""  # why the file cannot be written ("" while it can)

var _file: FileAccess = null
var _obs: Array = []
var _actions: Array = []
var _rewards: Array = []
var _masks: Array = []
var _mask_width := 0
var _crypto := Crypto.new()


# file_path: user://, res:// (not in an exported game) or an absolute path; check
# error_message afterwards ("" when the file is open).
func _init(file_path: String) -> void:
	path = file_path
	if path == "":
		error_message = "a demonstrations file needs a path"
		return
	if FileAccess.file_exists(path):
		_file = FileAccess.open(path, FileAccess.READ_WRITE)  # keeps what is there
	else:
		_file = FileAccess.open(path, FileAccess.WRITE)
	if _file == null:
		var error := FileAccess.get_open_error()
		error_message = (
			"cannot record demonstrations to %s: %s" % [path, error_string(error)]
		)
		return
	_file.seek_end()
	if _file.get_length() == 0:
		_file.store_line(HEADER)
		_file.flush()


func is_open() -> bool:
	return _file != null


# One decision: the observation, the action chosen on it (as set_action() takes it: an
# int, or an Array) and the mask it was chosen under (empty: all allowed). The first
# step of an episode starts it.
func step(obs, action, mask := []) -> void:
	_obs.append(Array(obs).duplicate())
	_actions.append(action.duplicate() if typeof(action) == TYPE_ARRAY else action)
	_rewards.append(0.0)
	if not mask.is_empty():
		_mask_width = mask.size()
	_masks.append(Array(mask).duplicate())


# Reward for the last step (added up); before an episode's first step it is dropped.
func add_reward(reward: float) -> void:
	if not _rewards.is_empty():
		_rewards[-1] += reward


# The episode is over: final_obs is the one it ended on. Writes the episode as one line
# and flushes; an episode with no step writes nothing.
func end_episode(final_obs, terminated: bool, truncated: bool) -> void:
	if _file == null or _actions.is_empty():
		_clear()
		return
	var chunk := {}
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
	_file.store_line(JsonWriter.write(chunk))
	_file.flush()
	episodes += 1
	steps += _actions.size()
	_clear()


# Closes the file; an episode not ended is not written.
func close() -> void:
	_clear()
	if _file != null:
		_file.close()
		_file = null


# Every step's mask, an unmasked step's as all allowed.
func _full_masks() -> Array:
	var rows: Array = []
	for mask in _masks:
		if mask.is_empty():
			var ones: Array = []
			ones.resize(_mask_width)
			ones.fill(1)
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

"""The tensor names of the exported ONNX: the ones RLLINK.md fixes, and the prefix of
every internal one, so that no `onnx_input_name` a user picks can collide with them."""

OUTPUT_NAME = "action_dist_inputs"
# A gSDE actor's exploring SET_STATE model has this second output: output 0 without this
# version's exploration noise, which evaluation episodes play the mode of.
NOISE_FREE_OUTPUT = "action_dist_inputs_noise_free"
ACTION_MASK_INPUT = "action_mask"  # [batch, k] float32, 1 allowed, 0 not: a masked module's second input
STATE_INPUT = "state_in"  # [batch, state_size] float32: a recurrent module's state before the step (RLLINK.md)
STATE_OUTPUT = "state_out"  # [batch, state_size] float32: its state after the step, fed back as the next state_in
INTERNAL_PREFIX = "rllink/"  # every node output and weight but the output itself


def input_name_problem(name: str) -> str | None:
    """Why `name` cannot be the observation input's name, or None if it can."""
    if name in (OUTPUT_NAME, NOISE_FREE_OUTPUT, STATE_OUTPUT):
        return f"{name!r} is the name of one of the model's outputs"
    if name in (ACTION_MASK_INPUT, STATE_INPUT):
        return f"{name!r} is the name of the model's {'action mask' if name == ACTION_MASK_INPUT else 'recurrent state'} input"
    if name.startswith(INTERNAL_PREFIX):
        return f"names starting with {INTERNAL_PREFIX!r} are the model's internal tensors"
    return None

# Editor side of the addon. The nodes register themselves with class_name
# (RLlinkAgent, RLlinkRaycastSensor2D, RLlinkRaycastSensor3D), so this plugin adds
# nothing: enabling it only lists the addon under Project > Project Settings > Plugins.
# A game needs none of it (the addon's scripts preload each other by path).
@tool
extends EditorPlugin


func _enter_tree() -> void:
	pass


func _exit_tree() -> void:
	pass

# Editor side of the addon: registers the RLlinkAgent node type, so it shows up in
# "Add Child Node". Only the editor runs this file; a game needs none of it (scripts
# preload the addon's files by path, so nothing depends on the plugin being enabled).
tool
extends EditorPlugin


func _enter_tree():
	# No icon: the addon ships no textures, so nothing needs importing.
	add_custom_type("RLlinkAgent", "Node", preload("res://addons/rllink/rllink_agent.gd"), null)


func _exit_tree():
	remove_custom_type("RLlinkAgent")

"""Trinity-RFT's side of the schema: its names, its aliases and the import of its YAML files.

- `names`: Trinity's other spellings of our values (sync_method online/offline, engine_type vllm_async, ...);
  the section models normalise them.
- `aliases`: Trinity's flat backend flags (`model.tinker`) mapped onto our one choice per side, applied by
  `ExperimentConfig` validation and by `--set` (`expand_override`).
- `workflows`: Trinity's workflow names covered by ours with other settings (math_boxed_workflow, simple_workflow,
  the async_* twins), applied with the aliases, and why each of the others is refused.
- `operators`: Trinity's experience operator dapo_dynamic_sampling as algorithm.filter_groups (applied with the
  aliases), and why its other operators not built are refused.
- `algorithms`: Trinity's algorithm types and functions not built, each with why (and the functions' arguments).
- `importer`: a Trinity YAML file read as an `ExperimentConfig` (`from schemas import import_trinity`),
  and written back as a recipe module.

`aliases`, `names`, `workflows`, `operators` and `algorithms` sit below `schemas.experiment` (it uses them);
`importer` sits above it (it validates with it). So this package's `__init__` imports none of them: import the module you need.
"""

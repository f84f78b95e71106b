"""Trinity-RFT's side of the schema: its names, its aliases and the import of its YAML files.

- `names`: Trinity's other spellings of our values (sync_method online/offline, engine_type vllm_async, ...);
  the section models normalise them.
- `aliases`: Trinity's flat backend flags (`model.tinker`) mapped onto our one choice per side, applied by
  `ExperimentConfig` validation and by `--set` (`expand_override`).
- `workflows`: Trinity's workflow names covered by ours with other settings (math_boxed_workflow), applied
  with the aliases.
- `importer`: a Trinity YAML file read as an `ExperimentConfig` (`from schemas import import_trinity`),
  and written back as a recipe module.

`aliases`, `names` and `workflows` sit below `schemas.experiment` (it uses them); `importer` sits above it (it
validates with it). So this package's `__init__` imports none of them: import the module you need.
"""

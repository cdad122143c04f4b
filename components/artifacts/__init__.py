"""The contracts of the artifacts that flow between the steps: what each folder holds and how it is read.

Data flows one way, convert -> check data -> train -> evaluate -> export; a step imports what stands under it here,
never a later or a sideways step (as TFX keeps ``standard_artifacts`` and ``path_utils`` below its components).
"""

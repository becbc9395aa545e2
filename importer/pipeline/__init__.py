"""One run of an import: reader task → bounded queues → consumers → applier → finalize;
multi-instance lanes (fan-out) and the observers of a run.
"""

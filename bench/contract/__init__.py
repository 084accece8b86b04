"""The identical-settings contract: the run spec, its flags and identity, the datasets and
their data order, and the checks that need no process group. Above the models."""

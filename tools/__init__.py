"""Tooling of the inductor fusion overlay: apply/revert the patch series and
overlay modules onto a torch 2.13.0 tree, plus the codegen corpus and demo."""

"""Bidding policies (OGD pacing, truthful, fixed multiplier) and Stable-Baselines3 helpers.

Empty until the environments issue lands; see DESIGN.md section 5.
"""

"""Curriculum mechanisms as small pure functions: near-duplicates, proposer rewards, level
bandit."""

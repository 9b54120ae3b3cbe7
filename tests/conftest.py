"""Shared fixtures for fanloop's own tests."""

from __future__ import annotations

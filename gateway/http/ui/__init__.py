"""The usage dashboard: its pages' files (HTML, CSS and JavaScript, package data) and what serves
them at /ui/, beside the API (dashboard.py)."""

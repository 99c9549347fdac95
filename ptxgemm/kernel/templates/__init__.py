"""The jinja2 templates that render ptxgemm's PTX. One file per hardware mechanism.

This directory is a package only so that the templates ship inside the wheel.
"""

"""r15: a 0.5 ms GIL switch interval in every Python process of the grid (on PYTHONPATH)."""
import sys

sys.setswitchinterval(0.0005)

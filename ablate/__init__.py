"""ablate: controlled ablation studies of the choices inside RL fine-tuning of language models.

Run ``ablate --help`` for the commands; see README.md for the two commands a newcomer needs.
"""

__version__ = "0.1.0"

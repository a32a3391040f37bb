"""python -m attn.models.induction --out DIR: train lesson 11's models and save them."""

from attn.models.induction.files import main

main()

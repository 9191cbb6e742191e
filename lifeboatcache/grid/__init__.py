"""``lifeboatcache grid``: fresh vLLM servers per configuration, replayed, compared and plotted."""

"""Where a step's time goes, a module per scenario: decoder (`profile-decoder`: ORT's profile of one decoder
step), beam (`profile-beam`: a beam step split into its parts), cross_products (`cross-products`), head_bits
(`head-bits`: a vocabulary head at 8, 4 and 2 bits), head_scan_size (`head-scan-size`: the scanned head by size)
and scan_recall (`scan-recall`: how often the scan misses float32's token)."""

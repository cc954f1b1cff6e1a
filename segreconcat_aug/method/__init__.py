"""The method, top to bottom: word times -> segments (:mod:`.segments`) -> an order per strategy
(:mod:`.strategies`: RR; :mod:`.similarity`: AR by MFCC + DTW (:mod:`.dtw`), SR by Whisper
encoder) -> the cached orders (:mod:`.orders`) -> rearranged and concatenated audio
(:mod:`.augment`).
"""
